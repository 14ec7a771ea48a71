"""kiln/lowering_codec.py without a daemon: a partitioned graph survives
the trip to plain data and back (nodes, metadata, get_attr tensors, what
it computes), graphs with no plain-data form are refused, and a payload
the codec did not write is never trusted."""
from __future__ import annotations

import os
import pickle

import pytest
import torch
import torch.fx as fx

from kiln import lowering_codec, partition

from unit import unit_graphs


def split_graph(inputs=None, fn=unit_graphs.linear_relu_scale,
                constants=frozenset({1, 2})) -> fx.GraphModule:
    lowered = unit_graphs.lowered(fn, inputs, constants)
    caps = unit_graphs.capabilities(lowered.gm, without=["aten.mul.Tensor"])
    return partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS)


def round_trip(split: fx.GraphModule, constants=frozenset({1, 2})) -> fx.GraphModule:
    payload = lowering_codec.encode_split(split, constants, "k" * 64, 1.5)
    return lowering_codec.decode_split(lowering_codec.loads(lowering_codec.dumps(payload)))


def node_summary(gm: fx.GraphModule) -> list[tuple]:
    return [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in gm.graph.nodes]


def test_the_payload_says_what_it_was_stored_with():
    payload = lowering_codec.encode_split(split_graph(), frozenset({2, 1}), "k" * 64, 1.5)
    assert payload["key"] == "k" * 64
    assert payload["cold_s"] == 1.5
    assert payload["constant_inputs"] == [1, 2]
    assert sorted(payload["graphs"]) == ["", "fused_0"]


def test_nodes_and_submodules_come_back_as_they_were():
    split = split_graph()
    back = round_trip(split)
    assert node_summary(back) == node_summary(split)
    assert node_summary(back.fused_0) == node_summary(split.fused_0)


def test_metadata_comes_back_as_fake_tensors_of_the_same_layout():
    split = split_graph()
    back = round_trip(split)
    for before, after in zip(split.fused_0.graph.nodes, back.fused_0.graph.nodes):
        if "val" not in before.meta:
            assert "val" not in after.meta
            continue
        want, got = before.meta["val"], after.meta["val"]
        assert isinstance(got, torch._subclasses.fake_tensor.FakeTensor)
        assert (got.shape, got.stride(), got.dtype, got.device) == (
            want.shape, want.stride(), want.dtype, want.device), before.name


def test_the_restored_graph_computes_what_eager_does():
    inputs = unit_graphs.example_inputs()
    back = round_trip(split_graph(inputs))
    torch.testing.assert_close(back(*inputs), unit_graphs.linear_relu_scale(*inputs))


def test_small_get_attr_tensors_are_stored_by_value():
    inputs = unit_graphs.example_inputs()
    split = split_graph(inputs)
    offset = torch.arange(4, dtype=torch.float32)
    split.register_buffer("offset", offset)
    output = next(n for n in split.graph.nodes if n.op == "output")
    with split.graph.inserting_before(output):
        added = split.graph.call_function(
            torch.ops.aten.add.Tensor, (output.args[0], split.graph.get_attr("offset")))
    output.args = (added,)
    split.recompile()
    back = round_trip(split)
    torch.testing.assert_close(back.offset, offset)
    torch.testing.assert_close(back(*inputs), unit_graphs.linear_relu_scale(*inputs) + offset)


def test_a_get_attr_tensor_past_the_limit_is_uncacheable():
    split = split_graph()
    big = torch.zeros(lowering_codec.MAX_ATTR_BYTES // 4 + 1)
    split.register_buffer("big", big)
    node = next(iter(split.graph.nodes))
    with split.graph.inserting_after(node):
        split.graph.get_attr("big")
    with pytest.raises(lowering_codec.Uncacheable, match="larger than"):
        lowering_codec.encode_split(split, frozenset({1, 2}), "k", 0.0)


def test_a_call_outside_aten_is_uncacheable():
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.relu, (x,)))
    with pytest.raises(lowering_codec.Uncacheable, match="call target"):
        lowering_codec.encode_split(fx.GraphModule(torch.nn.Module(), graph), frozenset(),
                                    "k", 0.0)


def test_loading_refuses_any_class_or_function():
    for hostile in (pickle.dumps(os.system), pickle.dumps(torch.zeros(1)),
                    pickle.dumps(fx.Graph())):
        with pytest.raises(pickle.UnpicklingError):
            lowering_codec.loads(hostile)


def test_a_payload_naming_an_unknown_target_is_a_bad_entry():
    payload = lowering_codec.encode_split(split_graph(), frozenset({1, 2}), "k", 0.0)
    op, name, _, args, kwargs, val = payload["graphs"]["fused_0"][3]
    assert op == "call_function"
    payload["graphs"]["fused_0"][3] = (op, name, ("exec", "anything"), args, kwargs, val)
    with pytest.raises(lowering_codec.BadEntry, match="call target"):
        lowering_codec.decode_split(payload)


def test_a_payload_naming_a_torch_attribute_that_is_no_dtype_is_a_bad_entry():
    payload = lowering_codec.encode_split(split_graph(), frozenset({1, 2}), "k", 0.0)
    graph = payload["graphs"]["fused_0"]
    op, name, target, args, kwargs, val = graph[0]
    assert val[0] == "T"
    graph[0] = (op, name, target, args, kwargs, ("T", "load", *val[2:]))
    with pytest.raises(lowering_codec.BadEntry, match="not a dtype"):
        lowering_codec.decode_split(payload)


def test_a_restored_graph_must_fit_the_inputs():
    back = round_trip(split_graph())
    lowering_codec.check_fits(back, unit_graphs.example_inputs())
    with pytest.raises(lowering_codec.BadEntry, match="does not match"):
        lowering_codec.check_fits(back, unit_graphs.example_inputs(batch=5))
    with pytest.raises(lowering_codec.BadEntry, match="placeholders"):
        lowering_codec.check_fits(back, unit_graphs.example_inputs()[:2])
