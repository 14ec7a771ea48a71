"""The lowering cache's codec: a partitioned FX graph (the `split`
GraphModule compile_graph builds, with its `fused_<n>` submodules and every
node's "val" metadata) to plain data and back.

Plain data means containers, strings, bytes and numbers only: call targets,
dtypes and devices are stored by name, "val" tensors as their shape,
strides, dtype and device (they come back as fake tensors). A graph that
holds anything else is Uncacheable. dumps() pickles such a payload and
loads() reads it with an unpickler that refuses every global, so reading a
payload cannot run code; decode_split() raises BadEntry for one it did not
write.

No daemon and no cache directory here: lowering_cache.py decides what is
stored where.
"""
from __future__ import annotations

import io
import math
import operator
import pickle
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.fx._lazy_graph_module import _LazyGraphModule, _make_graph_module
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, is_fake

from kiln.fx_attrs import fetch_attr, holder_of

# get_attr tensors above this are not hashed or stored: the graph is not cached.
MAX_ATTR_BYTES = 1 << 20

_MISSING = ("-",)  # node without a "val"


class Uncacheable(Exception):
    """The graph (or its lowering) is not one the cache takes."""


class BadEntry(Exception):
    """An entry that must not be used."""


def tensor_bytes(t: torch.Tensor) -> bytes:
    """t's elements, contiguous, as raw bytes."""
    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def small_real_tensor(value: Any, what: str) -> torch.Tensor:
    """`value` if it is a plain strided tensor of at most MAX_ATTR_BYTES;
    Uncacheable naming `what` otherwise."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or is_fake(value) \
            or value.layout != torch.strided:
        raise Uncacheable(f"{what} is not a plain tensor")
    if value.numel() * value.element_size() > MAX_ATTR_BYTES:
        raise Uncacheable(f"{what} is larger than {MAX_ATTR_BYTES} bytes")
    return value


_TORCH_VALUE_TYPES = (torch.dtype, torch.layout, torch.memory_format)


def _encode_target(target: Any) -> tuple:
    if isinstance(target, torch._ops.OpOverload):
        return ("op", target.namespace, target._opname, target._overloadname)
    if target is operator.getitem:
        return ("getitem",)
    raise Uncacheable(f"call target {target!r}")


def _encode_value(value: Any, index: dict[fx.Node, int]) -> Any:
    if isinstance(value, fx.Node):
        return ("n", index[value])
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else ("f", repr(value))
    # FX keeps lists as immutable_list; Size and other tuples as tuples
    # (namedtuples keep their type, which has no plain-data form).
    if isinstance(value, list) or (isinstance(value, tuple) and not hasattr(value, "_fields")):
        return ("l" if isinstance(value, list) else "t",
                [_encode_value(v, index) for v in value])
    if isinstance(value, _TORCH_VALUE_TYPES):
        return ("torch", str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return ("device", str(value))
    raise Uncacheable(f"argument {value!r} of type {type(value).__name__}")


def _encode_val(val: Any) -> Any:
    """A node's "val" metadata: shape, strides, dtype and device of each tensor."""
    if isinstance(val, torch.Tensor):
        if any(not isinstance(d, int) for d in (*val.shape, *val.stride())):
            raise Uncacheable("symbolic tensor metadata")
        return ("T", str(val.dtype).removeprefix("torch."), tuple(val.shape), tuple(val.stride()),
                str(val.device))
    if val is None or type(val) in (bool, int):
        return val
    if type(val) is float:
        return ("f", repr(val))
    if type(val) in (list, tuple):
        return ("l" if type(val) is list else "t", [_encode_val(v) for v in val])
    raise Uncacheable(f"node metadata of type {type(val).__name__}")


def _encode_graph(graph: fx.Graph) -> list[tuple]:
    index: dict[fx.Node, int] = {}
    nodes = []
    for i, node in enumerate(graph.nodes):
        if node.op == "call_function":
            target: Any = _encode_target(node.target)
        elif node.op in ("placeholder", "output", "get_attr", "call_module"):
            target = node.target
        else:
            raise Uncacheable(f"node {node.name!r}: FX op {node.op}")
        val = _encode_val(node.meta["val"]) if "val" in node.meta else _MISSING
        nodes.append((node.op, node.name, target, _encode_value(list(node.args), index),
                      [(k, _encode_value(v, index)) for k, v in node.kwargs.items()], val))
        index[node] = i
    return nodes


def encode_split(split: fx.GraphModule, constant_inputs: frozenset[int],
                 key: str, cold_s: float) -> dict:
    """The split graph, its fused submodules and their get_attr tensors as
    plain data (with `key`, `cold_s` and the weight positions alongside);
    Uncacheable for anything without a plain-data form."""
    from kiln.subgraph import KilnSubgraph
    graphs = {"": _encode_graph(split.graph)}
    tensors = []

    def attrs(owner: str, module: torch.nn.Module, graph: fx.Graph) -> None:
        for node in graph.nodes:
            if node.op == "get_attr":
                t = small_real_tensor(fetch_attr(module, node.target), f"get_attr {node.target!r}")
                tensors.append((owner, node.target, str(t.dtype).removeprefix("torch."),
                                tuple(t.shape), tuple(t.stride()), tensor_bytes(t)))

    attrs("", split, split.graph)
    for node in split.graph.nodes:
        if node.op != "call_module":
            continue
        module = getattr(split, node.target)
        if isinstance(module, KilnSubgraph):
            module = module.eager
        if not isinstance(module, fx.GraphModule) or "." in node.target:
            raise Uncacheable(f"submodule {node.target!r} is not a fused partition")
        if any(n.op == "call_module" for n in module.graph.nodes):
            raise Uncacheable(f"submodule {node.target!r} has submodules")
        graphs[node.target] = _encode_graph(module.graph)
        attrs(node.target, module, module.graph)
    return {"key": key, "cold_s": cold_s, "constant_inputs": sorted(constant_inputs),
            "graphs": graphs, "tensors": tensors}


class _Decoder:
    def __init__(self) -> None:
        self.fake_mode = FakeTensorMode()
        self.targets: dict[tuple, Any] = {}
        self.vals: dict[tuple, torch.Tensor] = {}

    def torch_value(self, name: str) -> Any:
        value = getattr(torch, name)
        if not isinstance(value, _TORCH_VALUE_TYPES):
            raise BadEntry(f"torch.{name} is not a dtype, layout or memory format")
        return value

    def target(self, enc: Any) -> Any:
        target = self.targets.get(enc)
        if target is None:
            if enc == ("getitem",):
                target = operator.getitem
            elif enc[0] == "op" and len(enc) == 4:
                target = getattr(getattr(getattr(torch.ops, enc[1]), enc[2]), enc[3])
                if not isinstance(target, torch._ops.OpOverload):
                    raise BadEntry(f"{enc} is not an op overload")
            else:
                raise BadEntry(f"call target {enc!r}")
            self.targets[enc] = target
        return target

    def value(self, enc: Any, nodes: list[fx.Node]) -> Any:
        if type(enc) is not tuple:
            return enc
        tag = enc[0]
        if tag == "n":
            return nodes[enc[1]]
        if tag == "l":
            return [self.value(v, nodes) for v in enc[1]]
        if tag == "t":
            return tuple(self.value(v, nodes) for v in enc[1])
        if tag == "f":
            return float(enc[1])
        if tag == "torch":
            return self.torch_value(enc[1])
        if tag == "device":
            return torch.device(enc[1])
        raise BadEntry(f"argument tag {tag!r}")

    def val(self, enc: Any) -> Any:
        if type(enc) is not tuple:
            return enc
        tag = enc[0]
        if tag == "T":
            fake = self.vals.get(enc)
            if fake is None:
                _, dtype, shape, stride, device = enc
                # A meta tensor wrapped directly: creating it through the fake
                # mode's dispatch costs milliseconds per tensor.
                meta = torch.empty_strided(shape, stride, dtype=self.torch_value(dtype),
                                           device="meta")
                fake = FakeTensor(self.fake_mode, meta, torch.device(device))
                self.vals[enc] = fake
            return fake
        if tag == "l":
            return [self.val(v) for v in enc[1]]
        if tag == "t":
            return tuple(self.val(v) for v in enc[1])
        if tag == "f":
            return float(enc[1])
        raise BadEntry(f"metadata tag {tag!r}")

    def graph(self, encoded: list) -> fx.Graph:
        graph = fx.Graph()
        nodes: list[fx.Node] = []
        for op, name, target, args, kwargs, val in encoded:
            if op == "call_function":
                target = self.target(target)
            node = graph.create_node(op, target, tuple(self.value(args, nodes)),
                                     {k: self.value(v, nodes) for k, v in kwargs},
                                     name=None if op == "output" else name)
            if node.name != name:
                raise BadEntry(f"node {name!r} came back as {node.name!r}")
            if val != _MISSING:
                node.meta["val"] = self.val(val)
            nodes.append(node)
        graph.lint()
        return graph


def decode_split(payload: dict) -> fx.GraphModule:
    """The split graph encode_split described, every node's "val" a fake
    tensor; BadEntry (or any exception) for a payload it did not write."""
    decoder = _Decoder()
    graphs = payload["graphs"]
    tensors: dict[str, dict[str, torch.Tensor]] = {}
    for owner, target, dtype, shape, stride, raw in payload["tensors"]:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        t = torch.empty_strided(shape, stride, dtype=decoder.torch_value(dtype))
        t.copy_(flat.view(t.dtype).reshape(shape))
        tensors.setdefault(owner, {})[target] = t

    def root_of(owner: str) -> torch.nn.Module:
        """A module holding `owner`'s get_attr tensors (GraphModule copies them)."""
        root = torch.nn.Module()
        for target, t in tensors.get(owner, {}).items():
            holder, leaf = holder_of(root, target)
            setattr(holder, leaf, t)
        return root

    # The fused submodules go in after the top module is built: building it
    # with them would generate their code a second time.
    root = root_of("")
    for name in graphs:
        if name:
            root.add_module(name, torch.nn.Module())
    # Lazy: their Python code is generated on first call, not here (a
    # fused submodule only runs if its partition falls back to eager).
    split = _make_graph_module(root, decoder.graph(graphs[""]), graph_module_cls=_LazyGraphModule)
    for name, encoded in graphs.items():
        if name:
            setattr(split, name, _make_graph_module(root_of(name), decoder.graph(encoded),
                                                    graph_module_cls=_LazyGraphModule))
    return split


def check_fits(split: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
    """The restored graph takes these inputs (as lowering.lower checks)."""
    placeholders = [n for n in split.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise BadEntry(f"{len(placeholders)} placeholders for {len(example_inputs)} inputs")
    for node, example in zip(placeholders, example_inputs):
        if not isinstance(example, torch.Tensor):
            continue
        val = node.meta.get("val")
        if (not isinstance(val, torch.Tensor) or val.dtype != example.dtype
                or tuple(val.shape) != tuple(example.shape)):
            raise BadEntry(f"input {node.name!r} does not match its example input")


class _PlainUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: an entry never names a class or
    function, so nothing in one can run code."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"entry names {module}.{name}")


def dumps(payload: dict) -> bytes:
    """An encode_split payload as bytes."""
    return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """What dumps() wrote; pickle.UnpicklingError for data naming any class
    or function."""
    return _PlainUnpickler(io.BytesIO(data)).load()
