"""kiln/call_plan.py without a daemon: where a partition's tensors go in
the arena, the slot bytes a channel call carries, and the same call as an
Execute request."""
from __future__ import annotations

import pytest
import torch

from kiln import channel, output_pool, partition, serialize, shm
from kiln.call_plan import CallPlan, Mismatch, evaluate_size, is_dense
from kiln.v1 import kiln_pb2

from unit import unit_graphs


def static_plan(batch: int = 3) -> CallPlan:
    lowered = unit_graphs.lowered(inputs=unit_graphs.example_inputs(batch))
    caps = unit_graphs.capabilities(lowered.gm)
    fused = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS).fused_0
    return CallPlan.for_static(serialize.serialize(fused, {1: "a" * 64, 2: "b" * 64}))


def test_a_static_plan_takes_the_per_call_inputs_and_eagers_outputs():
    plan = static_plan()
    assert plan.input_positions == [0]
    assert plan.input_metas == [(torch.Size([3, 8]), torch.float32)]
    assert plan.output_metas == [((3, 4), (4, 1), torch.float32)]
    assert plan.single_output
    x, w, b = unit_graphs.example_inputs()
    assert plan.take_inputs([x, w, b]) == [x]


def test_tensors_are_laid_out_aligned_one_after_another():
    plan = static_plan()
    assert plan.input_offsets == [0]
    assert plan.output_offsets == [shm.align(3 * 8 * 4)]
    assert plan.total_bytes == shm.align(3 * 8 * 4) + shm.align(3 * 4 * 4)
    assert plan.total_bytes % shm.ALIGNMENT == 0


def test_binding_points_slots_views_and_requests_at_the_region():
    plan = static_plan()
    region = shm.Region(4096, lambda name, size: 9)
    try:
        plan.bind(region)
        out_off = plan.output_offsets[0]
        assert plan.slot_list == [(9, 0, 96), (9, out_off, 48)]
        assert plan.slots == channel.pack_slots(plan.slot_list)
        assert plan.output_dense == [(region.address + out_off, 48)]
        assert plan.input_views[0].data_ptr() == region.address
        assert plan.output_views[0].data_ptr() == region.address + out_off
        request = plan.request("session", 5, {})
        assert request.session_id == "session" and request.handle == 5
        assert [(d.region_id, d.offset, d.byte_size) for d in request.inputs] == [(9, 0, 96)]
        assert [(d.region_id, d.offset, d.byte_size) for d in request.outputs] == [
            (9, out_off, 48)]
        assert list(request.outputs[0].meta.shape) == [3, 4]
    finally:
        plan.input_views = plan.output_views = []
        region.close()


def test_large_outputs_are_pooled_and_take_no_arena_room():
    rows = output_pool.MIN_BYTES // (4 * 4)  # a (rows, 4) float32 output of MIN_BYTES
    plan = static_plan(batch=rows)
    assert plan.pooled_outputs == [0]
    assert plan.total_bytes == shm.align(rows * 8 * 4)


def test_spinning_only_for_runs_known_to_be_short():
    plan = static_plan()
    assert plan.spin_s(0.0) == 0.0  # never ran: unknown
    assert plan.spin_s(CallPlan.SPIN_BELOW_US / 2) == CallPlan.SPIN_US * 1e-6
    assert plan.spin_s(CallPlan.SPIN_BELOW_US * 2) == 0.0


def test_dense_strides():
    assert is_dense((2, 3), (3, 1))
    assert is_dense((2, 3), (1, 2))  # another dimension order, still no gaps
    assert not is_dense((2, 3), (0, 1))  # expanded: overlapping
    assert not is_dense((2, 3), (4, 1))  # padded: gaps
    assert is_dense((0, 3), (0, 0))


def test_plain_sizes_evaluate_to_themselves():
    assert evaluate_size(5, {}) == 5


def test_a_variant_whose_outputs_disagree_with_eager_is_a_mismatch():
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm)
    fused = partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS).fused_0
    ser = serialize.serialize(fused, {1: "a" * 64, 2: "b" * 64})
    args = unit_graphs.example_inputs()
    response = kiln_pb2.CompileResponse(outputs=[shm.tensor_meta(torch.float32, [3, 5])])
    with pytest.raises(Mismatch, match="output 0"):
        CallPlan.for_variant(ser, args, response, {})
    response = kiln_pb2.CompileResponse(outputs=[shm.tensor_meta(torch.float32, [3, 4])])
    plan = CallPlan.for_variant(ser, args, response, {})
    assert plan.output_metas == [((3, 4), (4, 1), torch.float32)]
