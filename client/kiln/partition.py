"""Splitting an ATen graph into daemon partitions and eager nodes.

What the daemon supports comes only from its GetCapabilities answer (which
reads runtime/ops/ops.def), never from a list kept here.
"""
from __future__ import annotations

import operator
from typing import Callable, Collection, Iterable, Mapping

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from kiln import shm
from kiln.v1 import kiln_pb2

Capabilities = Mapping[str, frozenset[torch.dtype]]


def capabilities_from_proto(
        response: kiln_pb2.CapabilitiesResponse) -> dict[str, frozenset[torch.dtype]]:
    """target -> torch dtypes the daemon's kernel accepts."""
    caps = {}
    for op in response.ops:
        dtypes = set()
        for d in op.dtypes:
            try:
                dtypes.add(shm.torch_dtype(d))
            except KeyError:
                pass
        caps[op.target] = frozenset(dtypes)
    return caps


def view_ops_from_proto(response: kiln_pb2.CapabilitiesResponse) -> frozenset[str]:
    """Targets the daemon marks "view": they move elements and compute none,
    so a partition made of nothing else is not worth a round trip."""
    return frozenset(op.target for op in response.ops if "view" in op.traits)


# Ops that read their input's storage rather than its elements: the daemon
# runs them on dense tensors, so they go there only when eager's input is
# dense too (contiguous, at offset 0, alone in its storage).
_STORAGE_READERS = frozenset({"aten.as_strided.default", "aten.as_strided_.default"})


def _dense_in_eager(node: fx.Node) -> bool:
    """Whether the first argument of `node` is dense in eager."""
    source = node.args[0] if node.args else None
    return isinstance(source, fx.Node) and _dense_value(source)


def _dense_value(node: fx.Node) -> bool:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    try:
        return (val.is_contiguous() and val.storage_offset() == 0
                and val.untyped_storage().nbytes() == val.numel() * val.element_size())
    except (RuntimeError, NotImplementedError):  # no storage to ask about
        return False


def _aliases_its_input(node: fx.Node) -> bool:
    """An eager view: the op's output shares its first argument's storage."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    returns = target._schema.returns
    return bool(returns) and returns[0].alias_info is not None


def rebase_storage_readers(gm: fx.GraphModule) -> int:
    """Points each storage reader at the dense tensor whose storage it reads.

    as_strided reads its input's storage and ignores the input's sizes and
    strides, so as_strided(view(x)) is as_strided(x) whenever the views
    alias a dense x (with the view's storage offset made explicit). The
    daemon can then run it; the views it bypassed are dead code.
    Returns the number of nodes rewritten (gm is recompiled if any).
    """
    changed = 0
    for node in gm.graph.nodes:
        if str(node.target) not in _STORAGE_READERS or _dense_in_eager(node):
            continue
        first = node.args[0] if node.args else None
        source = first
        while (isinstance(source, fx.Node) and not _dense_value(source)
               and _aliases_its_input(source)):
            source = source.args[0] if source.args else None
        if not (isinstance(source, fx.Node) and _dense_value(source)):
            continue
        args = list(node.args)
        if len(args) < 4 or args[3] is None:
            offset = node.kwargs.get("storage_offset")
            if offset is None:
                offset = first.meta["val"].storage_offset()
            args = args[:3] + [offset]
        args[0] = source
        node.args = tuple(args)
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "storage_offset"}
        changed += 1
    if changed:
        gm.recompile()
    return changed


def storage_chains(gm: fx.GraphModule) -> set[str]:
    """Nodes that must run in eager so that a storage reader left in eager
    sees eager's storage: the views (and the view chain behind them) that
    feed it a tensor that is not dense in eager. A partition returns dense
    tensors, which would change what the reader reads."""
    names: set[str] = set()
    for node in gm.graph.nodes:
        if str(node.target) not in _STORAGE_READERS or _dense_in_eager(node):
            continue
        source = node.args[0] if node.args else None
        while (isinstance(source, fx.Node) and source.op == "call_function"
               and source.name not in names):
            names.add(source.name)
            if _dense_value(source) or not _aliases_its_input(source):
                break
            source = source.args[0] if source.args else None
    return names


def _tensors(value: object) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


class KilnOperatorSupport(OperatorSupportBase):
    """Accepts call_function nodes the daemon lists, with supported dtypes.

    Dtypes are checked on every tensor input and on the (first) output; a
    multi-output op's secondary outputs (e.g. max_pool2d indices, int64)
    are the kernel's business.
    """

    def __init__(self, capabilities: Capabilities, excluded: Collection[str] = (),
                 disabled: Callable[[object], bool] | None = None):
        super().__init__()
        self.capabilities = capabilities
        self.excluded = frozenset(excluded)  # node names kept in eager
        self.disabled = disabled  # target -> True if the user keeps it in eager

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: fx.Node) -> bool:
        if node.op != "call_function" or node.name in self.excluded:
            return False
        if self.disabled is not None and self.disabled(node.target):
            return False
        if node.target is operator.getitem:
            source = node.args[0]
            return isinstance(source, fx.Node) and self.is_node_supported(submodules, source)
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        dtypes = self.capabilities.get(str(node.target))
        if dtypes is None:
            return False
        inputs = [a.meta.get("val") for a in node.all_input_nodes]
        # Symbolic sizes reach the daemon as integer arguments (SymbolicSize);
        # symbolic floats and bools have no wire form.
        if any(isinstance(v, (torch.SymFloat, torch.SymBool)) for v in inputs):
            return False
        for val in inputs:
            for t in _tensors(val):
                if t.dtype not in dtypes:
                    return False
        out = node.meta.get("val")
        if isinstance(out, (list, tuple)):
            out = out[0] if out else None
        if str(node.target) in _STORAGE_READERS and not _dense_in_eager(node):
            return False
        return isinstance(out, torch.Tensor) and out.dtype in dtypes


def is_compute_node(node: fx.Node, views: Collection[str]) -> bool:
    """A call that computes: no getitem, and no op among `views`
    (view_ops_from_proto)."""
    return (node.op == "call_function" and node.target is not operator.getitem
            and str(node.target) not in views)


def partition(gm: fx.GraphModule, capabilities: Capabilities,
              excluded: Collection[str] = (), disabled: Callable[[object], bool] | None = None,
              min_size: int = 1, *, views: Collection[str]) -> fx.GraphModule:
    """Fuses supported regions of gm into `fused_<n>` submodules (in place).

    Nodes outside every partition, those named in `excluded`, those whose
    target `disabled` accepts, and partitions of fewer than `min_size`
    compute nodes (is_compute_node with `views`; 0 keeps partitions of
    views alone) stay in gm and run in eager.
    """
    partitioner = CapabilityBasedPartitioner(
        gm, KilnOperatorSupport(capabilities, set(excluded) | storage_chains(gm), disabled),
        allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if (sum(is_compute_node(n, views) for n in p.nodes) >= min_size
                      and any(n.target is not operator.getitem for n in p.nodes))]
    return partitioner.fuse_partitions(partitions)


# The copy_ that functionalization ends a graph with to write an updated
# value back into the input it mutates (a static KV cache's index_copy_):
# the value is computed in the daemon, the write-back is that copy.
WRITE_BACK = "writes an updated value back into an input"


def is_write_back(node: fx.Node) -> bool:
    first = node.args[0] if node.args else None
    return (node.target is torch.ops.aten.copy_.default and isinstance(first, fx.Node)
            and first.op == "placeholder")


def eager_reason(node: fx.Node, capabilities: Capabilities, excluded: Collection[str] = (),
                 disabled: Callable[[object], bool] | None = None, *,
                 chains: Collection[str] | None = None) -> str:
    """Why a call_function node left in eager is there, in a few words.
    `chains` is storage_chains() of the node's graph module, which callers
    asking about many nodes of one graph compute once."""
    if is_write_back(node):
        return WRITE_BACK
    if node.name in excluded:
        return "rejected by the daemon"
    if disabled is not None and disabled(node.target):
        return "disabled by option"
    if not isinstance(node.target, torch._ops.OpOverload):
        return f"not an ATen op ({getattr(node.target, '__name__', node.target)})"
    dtypes = capabilities.get(str(node.target))
    if dtypes is None:
        return "unsupported op"
    support = KilnOperatorSupport(capabilities)
    if str(node.target) in _STORAGE_READERS and not _dense_in_eager(node):
        return "reads the storage of an input that is not dense in eager"
    if chains is None and node.graph.owning_module is not None:
        chains = storage_chains(node.graph.owning_module)
    if chains is not None and node.name in chains:
        return "feeds a view that an op left in eager reads the storage of"
    if not support.is_node_supported({}, node):
        vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
        for t in (t for v in vals for t in _tensors(v)):
            if t.dtype not in dtypes:
                return f"dtype {str(t.dtype).replace('torch.', '')} not supported"
        return "symbolic float or bool argument"
    return "partition too small (min_partition_size)"
