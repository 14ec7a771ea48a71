"""The shape variants of a dynamic-shape partition.

Such a partition compiles to a template in the daemon; each new input
signature (its tensors' shapes and its size arguments' values) gets a
variant from Specialize and a call plan of its own (call_plan.py). This
module holds what is kept per signature and how a call's signature and its
symbols' values are read off its arguments; asking the daemon is
KilnSubgraph's.

Not thread-safe: KilnSubgraph uses it under its lock.
"""
from __future__ import annotations

import collections
from typing import Iterator, Sequence

import sympy
import torch

from kiln import serialize
from kiln.call_plan import CallPlan


def signature(ser: serialize.SerializedGraph, args: Sequence[object]) -> tuple:
    """What tells one variant from another: every tensor input's shape, then
    every size input's value."""
    return (tuple(tuple(args[i].shape) for i in ser.tensor_positions)
            + tuple(int(args[i]) for i in ser.size_positions))


def size_bindings(input_vals: Sequence[object], args: Sequence[object]) -> dict:
    """Symbol -> this call's value, for every size that is a bare symbol in
    the partition's placeholder values (`input_vals`, one per argument)."""
    bindings = {}
    for val, arg in zip(input_vals, args):
        if isinstance(val, torch.SymInt):
            if isinstance(val.node.expr, sympy.Symbol):
                bindings[val.node.expr] = int(arg)
        elif isinstance(val, torch.Tensor) and isinstance(arg, torch.Tensor):
            for dim, size in zip(val.shape, arg.shape):
                if isinstance(dim, torch.SymInt) and isinstance(dim.node.expr, sympy.Symbol):
                    bindings[dim.node.expr] = size
    return bindings


class VariantCache:
    """Signature -> the call plan of its variant (plan.handle names it in
    the daemon), least recently used first."""

    def __init__(self) -> None:
        self._plans: collections.OrderedDict[tuple, CallPlan] = collections.OrderedDict()

    def get(self, key: tuple) -> CallPlan | None:
        """The plan for `key`, now the most recently used; None if unknown."""
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def add(self, key: tuple, plan: CallPlan, limit: int) -> list[CallPlan]:
        """Keeps `plan` for `key`; returns the plans dropped to stay within
        `limit` (their daemon handles are the caller's to release)."""
        self._plans[key] = plan
        dropped = []
        while len(self._plans) > limit:
            dropped.append(self._plans.popitem(last=False)[1])
        return dropped

    def clear(self) -> list[CallPlan]:
        """Forgets every variant; returns their plans."""
        plans = list(self._plans.values())
        self._plans.clear()
        return plans

    def values(self) -> Iterator[CallPlan]:
        return iter(list(self._plans.values()))

    def __len__(self) -> int:
        return len(self._plans)
