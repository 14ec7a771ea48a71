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
        gm, KilnOperatorSupport(capabilities, excluded, disabled),
        allows_single_node_partition=True)
    partitions = [p for p in partitioner.propose_partitions()
                  if (sum(is_compute_node(n, views) for n in p.nodes) >= min_size
                      and any(n.target is not operator.getitem for n in p.nodes))]
    return partitioner.fuse_partitions(partitions)


def eager_reason(node: fx.Node, capabilities: Capabilities, excluded: Collection[str] = (),
                 disabled: Callable[[object], bool] | None = None) -> str:
    """Why a call_function node left in eager is there, in a few words."""
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
    if not support.is_node_supported({}, node):
        vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
        for t in (t for v in vals for t in _tensors(v)):
            if t.dtype not in dtypes:
                return f"dtype {str(t.dtype).replace('torch.', '')} not supported"
        return "symbolic float or bool argument"
    return "partition too small (min_partition_size)"
