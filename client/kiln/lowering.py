"""Dynamo graph -> functional ATen graph, and which inputs are weights.

Dynamo hands the backend parameters and buffers as ordinary graph inputs.
They are recognised from the placeholder's GraphArg source (or the example
being an nn.Parameter) so the daemon can treat them as frozen constants.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from typing import Sequence

import torch
import torch.fx as fx
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from kiln import partition
from kiln.fx_attrs import fetch_attr


class LoweringError(RuntimeError):
    """The graph cannot be lowered to a static functional ATen graph."""


@dataclasses.dataclass
class LoweredGraph:
    # Functional ATen graph; its placeholders map 1:1 to example_inputs.
    gm: fx.GraphModule
    # Indices (into example_inputs) of parameters and buffers.
    constant_inputs: frozenset[int]


def _source_names(source: object) -> list[str]:
    """Type names and members along a Dynamo source chain."""
    names = []
    while source is not None:
        names.append(type(source).__name__)
        for attr in ("member", "index"):
            value = getattr(source, attr, None)
            if isinstance(value, str):
                names.append(value)
        source = getattr(source, "base", None)
    return names


# Set on the placeholders lift_tensor_attributes adds: what they hold is a
# weight whatever its type.
LIFTED = "kiln_lifted_attribute"


_FLAT_WEIGHT_NAME = re.compile(r"^[LG]_.*_(parameters|buffers)_")


def is_param_or_buffer(node: fx.Node, example: object) -> bool:
    """True if a Dynamo placeholder is an nn.Module parameter or buffer."""
    if isinstance(example, torch.nn.Parameter) or node.meta.get(LIFTED):
        return True
    grapharg = node.meta.get("grapharg")
    if grapharg is None:
        # torch's aot_compile hands over placeholders without their
        # GraphArg; their names still spell the source Dynamo flattened
        # (L['model']._modules['bn1']._buffers['running_mean'] becomes
        # L_model_modules_bn1_buffers_running_mean_). A plain input taken
        # for a weight only costs a check of its bytes per call.
        return isinstance(node.target, str) and _FLAT_WEIGHT_NAME.match(node.target) is not None
    if isinstance(getattr(grapharg, "example", None), torch.nn.Parameter):
        return True
    names = _source_names(getattr(grapharg, "source", None))
    return ("UnspecializedParamBufferSource" in names or "ParamBufferSource" in names
            or "_parameters" in names or "_buffers" in names)


def lift_tensor_attributes(gm: fx.GraphModule) -> tuple[fx.GraphModule, list[torch.Tensor]]:
    """gm with each tensor it reads through get_attr made an input, after
    its own inputs, and those tensors in that order (gm itself and [] when
    there are none).

    Dynamo hands over weights as inputs, except under settings made for
    other backends: Inductor's `freezing` (with grad off), Dynamo's
    `prepare_freezing` and `install_free_tensors` keep them as attributes of
    gm. Taking both forms the same way here keeps the rest of the pipeline,
    which traces with fake inputs, independent of those settings. The
    lifted placeholders are weights (is_param_or_buffer): compiled in by
    content hash and checked on every call like any other.
    """
    lifted: dict[str, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.target not in lifted:
            value = fetch_attr(gm, node.target, None)
            if isinstance(value, torch.Tensor):
                lifted[node.target] = value
    if not lifted:
        return gm, []
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    last_input = None
    for node in graph.nodes:
        if node.op == "placeholder":
            last_input = node
    inputs: dict[str, fx.Node] = {}
    for target in lifted:
        if last_input is None:
            context = graph.inserting_before(next(iter(graph.nodes)))
        else:
            context = graph.inserting_after(last_input)
        with context:
            last_input = graph.placeholder(_identifier(target))
        last_input.meta[LIFTED] = True
        inputs[target] = last_input
    for node in list(graph.nodes):
        if node.op == "get_attr" and node.target in inputs:
            if "val" in node.meta:
                inputs[node.target].meta.setdefault("val", node.meta["val"])
            node.replace_all_uses_with(inputs[node.target])
            graph.erase_node(node)
    return fx.GraphModule(gm, graph), list(lifted.values())


def _identifier(target: str) -> str:
    name = "".join(c if c.isalnum() else "_" for c in target)
    return name if name[:1].isalpha() else f"w_{name}"


@functools.lru_cache(maxsize=None)
def _default_decompositions() -> dict:
    """The decomposition table used for lowering (core ATen).

    Ops the daemon runs whole are kept: aten.roll would otherwise become
    arange + add + fmod + index_select per rolled dim (swin's shifted
    windows), and aten.select_scatter a where over an arange and the source
    expanded to the whole tensor (Longformer's window edges), where the
    daemon writes one slab in place, and aten._safe_softmax a softmax,
    an eq, an any, a full_like and a where over the whole scores
    (attention with a mask, as nn.MultiheadAttention and timm's models
    compute it), where the daemon makes one pass. Fused CPU attention (what
    scaled_dot_product_attention becomes on CPU) is kept too: the daemon's
    fused kernel replaces a dozen nodes (bmm, softmax and the
    fully-masked-row fix-up) per attention. A kept op the daemon cannot run
    for its dtypes is decomposed after all (decompose.py).
    """
    table = core_aten_decompositions()
    table.pop(torch.ops.aten.roll.default, None)
    table.pop(torch.ops.aten.select_scatter.default, None)
    table.pop(torch.ops.aten._safe_softmax.default, None)
    table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return table


def decompositions() -> dict:
    """A copy of the lowering's decomposition table (built once: building
    core ATen's table costs about 0.1 s per compiled graph)."""
    return dict(_default_decompositions())


def _extra_table(ops: Sequence[str]) -> dict:
    """Decompositions of the ops named (options decompositions)."""
    from torch._decomp import get_decompositions
    from kiln.options import resolve_op
    table = get_decompositions([resolve_op(name) for name in ops])
    covered = {str(op) for op in table} | {str(op).rsplit(".", 1)[0] for op in table}
    missing = [name for name in ops if name not in covered]
    if missing:
        raise ValueError(f"kiln option 'decompositions': torch._decomp has no decomposition "
                         f"for {', '.join(missing)}")
    return table


def decomposition_table(extra: Sequence[str] = ()) -> dict:
    """The default table plus the decompositions of the ops named in `extra`
    (options decompositions)."""
    table = decompositions()
    if extra:
        table.update(_extra_table(tuple(extra)))
    return table


def tensor_positions(positions: frozenset[int], example_inputs: Sequence[object]) -> frozenset[int]:
    """The positions that hold tensors (weights are tensors; sizes are not)."""
    return frozenset(i for i in positions if isinstance(example_inputs[i], torch.Tensor))


def constant_positions(gm: fx.GraphModule, example_inputs: Sequence[object],
                       constant_inputs: frozenset[int] | None = None) -> frozenset[int]:
    """Positions of the inputs that are weights: `constant_inputs` if the
    caller knows them, else those whose placeholder is a parameter or buffer
    (tensors only either way). lower() and the lowering cache's key agree
    through this one function."""
    if constant_inputs is not None:
        return frozenset(i for i in constant_inputs
                         if isinstance(example_inputs[i], torch.Tensor))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return frozenset(i for i, (n, e) in enumerate(zip(placeholders, example_inputs))
                     if isinstance(e, torch.Tensor) and is_param_or_buffer(n, e))


def _mutating_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """Calls of ATen ops that write into a value of the graph (copy_, add_,
    ...). Writes into an input itself are not counted: functionalization
    ends a graph that mutates its inputs with copy_ into them, which runs in
    eager after everything that reads them."""
    found = []
    for n in gm.graph.nodes:
        if (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                and n.target._schema.is_mutable):
            first = n.args[0] if n.args else None
            if not (isinstance(first, fx.Node) and first.op == "placeholder"):
                found.append(n)
    return found


def _assert_holds(node: fx.Node) -> bool:
    """Whether an aten._assert_tensor_metadata node (torch.export puts one
    before each .to()) asserts what the traced value already is: with
    static shapes and Dynamo's guards on the inputs, then it holds on every
    call and checks nothing."""
    val = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return False
    schema = node.target._schema
    given = dict(zip((a.name for a in schema.arguments), node.args))
    given.update(node.kwargs)
    checks = {"size": lambda v: list(v) == list(val.shape),
              "stride": lambda v: list(v) == list(val.stride()),
              "dtype": lambda v: v == val.dtype,
              "device": lambda v: torch.device(v) == val.device,
              "layout": lambda v: v == val.layout}
    for name, value in given.items():
        if name == "a" or value is None:
            continue
        if name not in checks or not checks[name](value):
            return False
    return True


def drop_proven_asserts(gm: fx.GraphModule) -> int:
    """Removes the metadata assertions that hold (_assert_holds); one that
    fails stays, so eager raises as it would. Returns how many went."""
    dropped = 0
    for node in list(gm.graph.nodes):
        if (node.op == "call_function"
                and node.target is torch.ops.aten._assert_tensor_metadata.default
                and not node.users and _assert_holds(node)):
            gm.graph.erase_node(node)
            dropped += 1
    return dropped


def lower(gm: fx.GraphModule, example_inputs: Sequence[object],
          extra_decompositions: Sequence[str] = (),
          constant_inputs: frozenset[int] | None = None) -> LoweredGraph:
    """Traces gm into a functional ATen graph with static shapes.

    `extra_decompositions`: op names decomposed on top of the default table.
    `constant_inputs`: which inputs are weights, if the caller knows (else
    read from the placeholders' Dynamo metadata).

    Raises LoweringError for graphs kiln cannot take whole (symbolic shapes,
    non-tensor inputs); the caller runs those in eager.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise LoweringError(
            f"{len(placeholders)} placeholders but {len(example_inputs)} example inputs")
    for node, example in zip(placeholders, example_inputs):
        # Concrete ints (sizes of a specialised dynamic-shape graph) are
        # baked in by tracing; symbolic values cannot be.
        if isinstance(example, int) and not isinstance(example, bool):
            continue
        if not isinstance(example, torch.Tensor):
            raise LoweringError(f"input {node.name!r} is a {type(example).__name__}, "
                                "not a tensor or int")
        if any(not isinstance(s, int) for s in example.shape):
            raise LoweringError(f"input {node.name!r} has a symbolic shape")
    constants = constant_positions(gm, example_inputs, constant_inputs)
    table = decomposition_table(extra_decompositions)

    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    if fake_mode is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        fake_mode = FakeTensorMode()
    # tracing_mode="real" on fake inputs: "fake" would create fresh symbols
    # Dynamo's guards know nothing about.
    with torch.no_grad(), fake_mode:
        fake_inputs = [fake_mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
                       for t in example_inputs]
        aten = make_fx(torch.func.functionalize(gm, remove="mutations"),
                       decomposition_table=table,
                       tracing_mode="real")(*fake_inputs)
        if _mutating_nodes(aten):
            # A decomposition that writes in place (circular padding's
            # copy_ into slices of an empty tensor) runs below the
            # functionalization it was traced under; functionalizing the
            # decomposed graph again turns its writes into values. Nodes
            # that write through views must never be split from the views
            # (the daemon's views are copies).
            aten = make_fx(torch.func.functionalize(aten, remove="mutations"),
                           decomposition_table=table,
                           tracing_mode="real")(*fake_inputs)
    mutating = _mutating_nodes(aten)
    if mutating:
        raise LoweringError(f"the lowered graph writes in place ({mutating[0].target})")
    partition.rebase_storage_readers(aten)
    drop_proven_asserts(aten)
    aten.graph.eliminate_dead_code()
    aten.recompile()

    lowered_placeholders = [n for n in aten.graph.nodes if n.op == "placeholder"]
    if len(lowered_placeholders) != len(example_inputs):
        raise LoweringError(f"lowered graph has {len(lowered_placeholders)} inputs, "
                            f"expected {len(example_inputs)}")
    for node, example in zip(lowered_placeholders, example_inputs):
        if not isinstance(example, torch.Tensor):
            continue
        val = node.meta.get("val")
        if (not isinstance(val, torch.Tensor) or val.dtype != example.dtype
                or tuple(val.shape) != tuple(example.shape)):
            raise LoweringError(f"lowered input {node.name!r} does not match its example input")
    return LoweredGraph(aten, constants)
