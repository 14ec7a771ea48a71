"""kiln/shape_variants.py without a daemon: one call plan per input
signature, the least recently used dropped past the limit."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

from kiln import serialize
from kiln.call_plan import CallPlan, evaluate_size
from kiln.shape_variants import VariantCache, signature, size_bindings


def plan(handle: int) -> CallPlan:
    p = CallPlan([0], [(torch.Size([handle]), torch.float32)], [((handle,), (1,), torch.float32)],
                 single_output=True)
    p.handle = handle
    return p


def test_a_known_signature_gives_its_plan_back():
    cache = VariantCache()
    assert cache.get((1,)) is None
    first = plan(1)
    assert cache.add((1,), first, limit=4) == []
    assert cache.get((1,)) is first
    assert len(cache) == 1


def test_past_the_limit_the_least_recently_used_is_dropped():
    cache = VariantCache()
    plans = {k: plan(k) for k in (1, 2, 3)}
    cache.add((1,), plans[1], limit=2)
    cache.add((2,), plans[2], limit=2)
    cache.get((1,))  # now 2 is the least recently used
    assert cache.add((3,), plans[3], limit=2) == [plans[2]]
    assert cache.get((2,)) is None
    assert [p.handle for p in cache.values()] == [1, 3]


def test_clearing_returns_every_plan_for_release():
    cache = VariantCache()
    for k in (1, 2):
        cache.add((k,), plan(k), limit=4)
    assert sorted(p.handle for p in cache.clear()) == [1, 2]
    assert len(cache) == 0 and list(cache.values()) == []


def test_the_signature_is_the_tensor_shapes_then_the_sizes():
    ser = serialize.SerializedGraph(graph=None, input_metas=[], output_vals=[],
                                    single_output=True, tensor_positions=[0, 2],
                                    size_positions=[1])
    args = [torch.empty(2, 3), 7, torch.empty(5)]
    assert signature(ser, args) == ((2, 3), (5,), 7)


def test_static_placeholder_values_bind_no_symbols():
    assert size_bindings([torch.empty(2, 3), 4], [torch.empty(2, 3), 4]) == {}


def test_a_symbolic_dimension_binds_to_the_calls_size():
    mode = FakeTensorMode(shape_env=ShapeEnv())
    val = mode.from_tensor(torch.empty(4, 3), symbolic_context=StatelessSymbolicContext(
        dynamic_sizes=[DimDynamic.DYNAMIC, DimDynamic.STATIC]))
    bindings = size_bindings([val], [torch.empty(9, 3)])
    assert list(bindings.values()) == [9]
    assert evaluate_size(val.shape[0] * 2, bindings) == 18
    assert evaluate_size(val.shape[0], {}) is None  # not determined by this call
