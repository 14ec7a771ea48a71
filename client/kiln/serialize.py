"""FX (functional ATen) graph -> kiln.v1.Graph.

The daemon's graph is a flat, topologically ordered node list. FX getitem
nodes never become daemon nodes: `operator.getitem(n, i)` is a NodeRef to
output i of n. Placeholders become Placeholder or, for parameters and
buffers, ConstantRef nodes resolved by content hash.

Dynamic shapes: a placeholder whose value is a SymInt (a size Dynamo made
symbolic) becomes a SymbolicSize node, symbolic tensor dimensions are sent
as -1, and arguments naming a size are NodeRefs to it. Such a graph is a
template the daemon specializes per concrete shape (subgraph.py).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Mapping

import torch
import torch.fx as fx

from kiln import shm
from kiln.v1 import kiln_pb2


class SerializationError(ValueError):
    """The graph uses something the wire format cannot express."""


_MEMORY_FORMATS = {
    torch.contiguous_format: kiln_pb2.CONTIGUOUS_FORMAT,
    torch.channels_last: kiln_pb2.CHANNELS_LAST,
    torch.preserve_format: kiln_pb2.PRESERVE_FORMAT,
}


@dataclasses.dataclass
class SerializedGraph:
    graph: kiln_pb2.Graph
    input_metas: list[kiln_pb2.TensorMeta]   # one per Placeholder node, in order
    output_vals: list[torch.Tensor]           # fake values of the graph outputs
    single_output: bool                        # the FX graph returns one value, not a tuple
    # Positions (among the FX placeholders) of the per-call tensor inputs and
    # of the symbolic sizes, in the graph's order.
    tensor_positions: list[int] = dataclasses.field(default_factory=list)
    size_positions: list[int] = dataclasses.field(default_factory=list)

    @property
    def dynamic(self) -> bool:
        return bool(self.size_positions) or any(
            d < 0 for m in self.input_metas for d in m.shape)


def is_symbolic(value: object) -> bool:
    return isinstance(value, torch.SymInt) and not isinstance(
        getattr(value.node, "maybe_as_int", lambda: None)(), int)


def _dims(val: torch.Tensor) -> list[int]:
    """Sizes with symbolic ones as -1 (never int() of a SymInt: that would
    add a guard and specialize Dynamo's graph)."""
    return [-1 if isinstance(d, torch.SymInt) and is_symbolic(d) else int(d) for d in val.shape]


def tensor_val(node: fx.Node) -> torch.Tensor:
    """The (fake) tensor value FX recorded for a node."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise SerializationError(
            f"node {node.name!r} has no tensor value (got {type(val).__name__})")
    return val


def meta_of(val: torch.Tensor, name: str) -> kiln_pb2.TensorMeta:
    dims = _dims(val)
    if any(d < 0 for d in dims):
        try:
            return kiln_pb2.TensorMeta(dtype=shm.wire_dtype(val.dtype), shape=dims)
        except KeyError:
            raise SerializationError(f"node {name!r}: dtype {val.dtype} has no wire type") from None
    try:
        return shm.tensor_meta(val.dtype, dims)
    except KeyError:
        raise SerializationError(f"node {name!r}: dtype {val.dtype} has no wire type") from None
    except TypeError:
        raise SerializationError(f"node {name!r}: symbolic shape {tuple(val.shape)}") from None


class _Builder:
    def __init__(self) -> None:
        self.graph = kiln_pb2.Graph()
        self.refs: dict[fx.Node, tuple[int, int]] = {}
        # Nodes producing several outputs: only reachable through getitem.
        self.multi: set[fx.Node] = set()

    def add(self, node: fx.Node, proto: kiln_pb2.Node) -> None:
        proto.name = node.name
        self.refs[node] = (len(self.graph.nodes), 0)
        self.graph.nodes.append(proto)

    def ref(self, node: fx.Node, user: str) -> kiln_pb2.NodeRef:
        if node not in self.refs:
            raise SerializationError(f"node {user!r} uses {node.name!r}, which is not in the graph")
        if node in self.multi:
            raise SerializationError(
                f"node {user!r} uses all outputs of {node.name!r} at once")
        index, output = self.refs[node]
        return kiln_pb2.NodeRef(node=index, output=output)

    def argument(self, value: Any, user: str) -> kiln_pb2.Argument:
        arg = kiln_pb2.Argument()
        if isinstance(value, fx.Node):
            arg.node.CopyFrom(self.ref(value, user))
        elif value is None:
            arg.none.SetInParent()
        elif isinstance(value, bool):
            arg.bool_value = value
        elif isinstance(value, torch.SymInt) and not is_symbolic(value):
            arg.int_value = int(value)
        elif isinstance(value, int):
            arg.int_value = value
        elif isinstance(value, float):
            arg.float_value = value
        elif isinstance(value, str):
            arg.str_value = value
        elif isinstance(value, (list, tuple)):
            arg.list.SetInParent()
            for item in value:
                arg.list.items.append(self.argument(item, user))
        elif isinstance(value, torch.dtype):
            try:
                arg.dtype = shm.wire_dtype(value)
            except KeyError:
                raise SerializationError(f"node {user!r}: dtype {value} has no wire type") from None
        elif isinstance(value, torch.device):
            arg.device = str(value)
        elif isinstance(value, torch.memory_format):
            if value not in _MEMORY_FORMATS:  # channels_last_3d
                raise SerializationError(f"node {user!r}: memory format {value} has no wire form")
            arg.memory_format = _MEMORY_FORMATS[value]
        elif value is torch.strided:
            # Factory ops' `layout=torch.strided` is the only layout the
            # daemon has (dense tensors); it is sent as "not given".
            arg.none.SetInParent()
        else:
            raise SerializationError(
                f"node {user!r}: argument {value!r} of type {type(value).__name__} "
                "has no wire form")
        return arg


def serialize(gm: fx.GraphModule, constant_hashes: Mapping[int, str]) -> SerializedGraph:
    """Converts a functional ATen GraphModule into a kiln.v1.Graph.

    constant_hashes maps placeholder positions that are parameters/buffers to
    their content hash; those become ConstantRef nodes, the other
    placeholders become Placeholder nodes (graph inputs, in order).
    """
    b = _Builder()
    input_metas: list[kiln_pb2.TensorMeta] = []
    output_vals: list[torch.Tensor] = []
    tensor_positions: list[int] = []
    size_positions: list[int] = []
    single_output = False
    position = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            proto = kiln_pb2.Node()
            val = node.meta.get("val")
            if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                proto.size.SetInParent()
                size_positions.append(position)
                b.add(node, proto)
                position += 1
                continue
            meta = meta_of(tensor_val(node), node.name)
            if position in constant_hashes:
                proto.constant.hash = constant_hashes[position]
                proto.constant.meta.CopyFrom(meta)
            else:
                proto.placeholder.meta.CopyFrom(meta)
                input_metas.append(meta)
                tensor_positions.append(position)
            b.add(node, proto)
            position += 1
        elif node.op == "call_function":
            if node.target is operator.getitem:
                source, index = node.args
                if source not in b.multi:
                    raise SerializationError(
                        f"node {node.name!r}: getitem of {getattr(source, 'name', source)!r}, "
                        "which is not a multi-output op")
                b.refs[node] = (b.refs[source][0], int(index))
                continue
            if not isinstance(node.target, torch._ops.OpOverload):
                raise SerializationError(
                    f"node {node.name!r}: {node.target} is not an ATen overload")
            call = kiln_pb2.Call(target=str(node.target))
            for value in node.args:
                call.args.append(b.argument(value, node.name))
            for key, value in node.kwargs.items():
                call.kwargs.append(kiln_pb2.NamedArgument(
                    name=key, value=b.argument(value, node.name)))
            proto = kiln_pb2.Node()
            proto.call.CopyFrom(call)
            b.add(node, proto)
            if isinstance(node.meta.get("val"), (tuple, list)):
                b.multi.add(node)
        elif node.op == "output":
            result = node.args[0]
            single_output = not isinstance(result, (tuple, list))
            values = [result] if single_output else list(result)
            for value in values:
                if not isinstance(value, fx.Node):
                    raise SerializationError(f"graph output {value!r} is not a node")
                if value.op == "placeholder":
                    raise SerializationError(f"graph output {value.name!r} is an input")
                b.graph.outputs.append(b.ref(value, "output"))
                output_vals.append(tensor_val(value))
        else:
            raise SerializationError(f"node {node.name!r}: unsupported FX op {node.op!r}")
    return SerializedGraph(b.graph, input_metas, output_vals, single_output,
                           tensor_positions, size_positions)
