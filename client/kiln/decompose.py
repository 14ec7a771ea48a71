"""Decomposing the nodes the daemon cannot run into ones it can.

Core ATen's table (lowering.py) leaves many ops whole that torch._decomp
can still write in simpler ATen ops: copies of views (view_copy,
narrow_copy), interpolation modes, signbit, addmv, erfcx and others. A node
whose op the daemon lacks (or lacks for its dtypes) is replaced by its
decomposition when, traced on the node's own arguments, the decomposition
uses nothing but ops the daemon runs for those dtypes. Otherwise the node
stays whole and runs in eager, as before: a decomposition that still needs
eager would only split the graph into more pieces.

The decomposition is PyTorch's own (torch._decomp, tested against eager by
PyTorch); ops the user disabled are never decomposed.
"""
from __future__ import annotations

import logging
import operator
from typing import Callable, Mapping

import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils import _pytree as pytree

from kiln import partition

log = logging.getLogger("kiln")

# Rounds of decomposition: a decomposition's ops are traced with the
# lowering's table, so one round reaches core ATen; a second catches
# decompositions that produce other non-core ops.
_MAX_ROUNDS = 2


def _decomposition(target: object) -> Callable | None:
    from torch._decomp import decomposition_table
    if not isinstance(target, torch._ops.OpOverload):
        return None
    return decomposition_table.get(target)


def _trace(node: fx.Node, fn: Callable, table: Mapping) -> fx.GraphModule | None:
    """fn (a decomposition) traced on node's fake arguments into a functional
    graph, or None if it cannot be traced or writes in place."""
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, fx.Node)]
    vals = [leaves[i].meta.get("val") for i in positions]
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return None  # a symbolic or list argument: leave it whole

    def call(*tensors):
        filled = list(leaves)
        for i, t in zip(positions, tensors):
            filled[i] = t
        args, kwargs = pytree.tree_unflatten(filled, spec)
        return fn(*args, **kwargs)

    fake_mode = torch._guards.detect_fake_mode(vals)
    if fake_mode is None:
        return None
    try:
        with torch.no_grad(), fake_mode:
            traced = make_fx(torch.func.functionalize(call, remove="mutations"),
                             decomposition_table=table, tracing_mode="real")(*vals)
    except Exception as e:  # noqa: BLE001 - any failure means: keep the node
        log.debug("kiln: decomposing %s failed to trace: %s", node.target, e)
        return None
    for n in traced.graph.nodes:
        if n.op == "get_attr":
            return None  # a constant the decomposition made: not worth carrying over
        if (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                and n.target._schema.is_mutable):
            return None
    return traced


def _signature(node: fx.Node) -> tuple:
    """The node's op and arguments, tensors by their metadata."""
    leaves, spec = pytree.tree_flatten((node.args, node.kwargs))
    parts = []
    for leaf in leaves:
        val = leaf.meta.get("val") if isinstance(leaf, fx.Node) else None
        if isinstance(val, torch.Tensor):
            parts.append(("t", tuple(val.shape), tuple(val.stride()), val.storage_offset(),
                          val.dtype))
        elif isinstance(leaf, fx.Node):
            parts.append(("n", leaf.name))  # not a tensor: never shared
        else:
            parts.append(("v", repr(leaf)))
    return (str(node.target), str(spec), tuple(parts))


def _all_supported(traced: fx.GraphModule, support: partition.KilnOperatorSupport) -> bool:
    for n in traced.graph.nodes:
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if not support.is_node_supported({}, n):
            return False
    return True


def _inline(gm: fx.GraphModule, node: fx.Node, traced: fx.GraphModule) -> None:
    """Replaces node by traced's nodes (its placeholders bound to node's
    tensor arguments, in order)."""
    leaves, _ = pytree.tree_flatten((node.args, node.kwargs))
    inputs = [leaf for leaf in leaves if isinstance(leaf, fx.Node)]
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    val_map: dict[fx.Node, fx.Node] = dict(zip(placeholders, inputs))
    with gm.graph.inserting_before(node):
        result = gm.graph.graph_copy(traced.graph, val_map)
    if isinstance(result, (list, tuple)):
        for user in list(node.users):
            if user.target is operator.getitem and isinstance(user.args[1], int):
                user.replace_all_uses_with(result[user.args[1]])
                gm.graph.erase_node(user)
        if node.users:  # the tuple itself is used: rebuild it is not worth it
            raise RuntimeError("tuple result used whole")
    else:
        node.replace_all_uses_with(result)
    gm.graph.erase_node(node)


def decompose_unsupported(gm: fx.GraphModule, capabilities: partition.Capabilities,
                          table: Mapping,
                          disabled: Callable[[object], bool] | None = None) -> int:
    """Replaces, in place, each node of gm the daemon cannot run by its
    torch._decomp decomposition when every op of that decomposition (traced
    with `table`, the lowering's) is one the daemon runs for its dtypes.
    Returns how many nodes were replaced."""
    support = partition.KilnOperatorSupport(capabilities)
    replaced = 0
    # Nodes of one op on arguments of one signature trace the same way: a
    # model repeating an op a decomposition cannot serve pays one trace.
    traces: dict[tuple, fx.GraphModule | None] = {}
    for _ in range(_MAX_ROUNDS):
        changed = 0
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            if disabled is not None and disabled(node.target):
                continue
            if support.is_node_supported({}, node):
                continue
            fn = _decomposition(node.target)
            if fn is None:
                continue
            key = _signature(node)
            if key not in traces:
                traced = _trace(node, fn, table)
                traces[key] = traced if traced is not None and _all_supported(
                    traced, support) else None
            traced = traces[key]
            if traced is None:
                continue
            out = node.meta.get("val")
            results = [n for n in traced.graph.nodes if n.op == "output"][0].args[0]
            if isinstance(out, (list, tuple)) != isinstance(results, (list, tuple)):
                continue
            if isinstance(out, (list, tuple)) and any(
                    not (u.target is operator.getitem and isinstance(u.args[1], int))
                    for u in node.users):
                continue
            _inline(gm, node, traced)
            changed += 1
        replaced += changed
        if not changed:
            break
    if replaced:
        gm.graph.eliminate_dead_code()
        gm.recompile()
        log.debug("kiln: decomposed %d node(s) the daemon lacks into ops it runs", replaced)
    return replaced
