"""kiln/lowering_key.py without a daemon: the lowering cache's key follows
what decides the lowered graph (its code, input layouts, weight positions,
options, the daemon's capabilities) and not the weights' values; graphs
whose result those do not pin down have no key."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.fx as fx

from kiln.lowering_codec import Uncacheable
from kiln.lowering_key import key_for
from kiln.options import KilnOptions

from unit import unit_graphs

CAPS = b"capabilities as the daemon serialized them"
WEIGHTS = frozenset({1, 2})


def key(inputs=None, gm=None, constants=WEIGHTS, opts=None, caps=CAPS) -> str:
    gm = fx.symbolic_trace(unit_graphs.linear_relu_scale) if gm is None else gm
    inputs = unit_graphs.example_inputs() if inputs is None else inputs
    return key_for(gm, inputs, constants, opts or KilnOptions.from_mapping(None), caps)


def test_the_same_compile_has_the_same_key():
    first = key()
    assert len(first) == 64 and int(first, 16) >= 0
    assert key() == first


def test_weight_values_are_not_in_the_key():
    x, w, b = unit_graphs.example_inputs()
    assert key([x, w + 1, b * 3]) == key([x, w, b])


def test_an_input_of_another_shape_or_dtype_changes_the_key():
    x, w, b = unit_graphs.example_inputs()
    assert key([torch.randn(5, 8), w, b]) != key([x, w, b])
    assert key([x.double(), w.double(), b.double()]) != key([x, w, b])
    assert key([x.t().contiguous().t(), w, b]) != key([x, w, b])  # other strides


def test_inputs_sharing_storage_change_the_key():
    _, _, b = unit_graphs.example_inputs()
    shared, one, other = torch.randn(2, 4, 8), torch.randn(2, 4, 8), torch.randn(2, 4, 8)
    # The same views of the same layouts: only whether they share storage differs.
    apart = key([one[0][:3], other[1], b])
    assert key([other[0][:3], one[1], b]) == apart
    assert key([shared[0][:3], shared[1], b]) != apart


def test_weight_positions_options_and_capabilities_are_in_the_key():
    base = key()
    assert key(constants=frozenset({1})) != base
    opts = KilnOptions.from_mapping(None)
    assert key(opts=dataclasses.replace(opts, min_partition_size=3)) != base
    assert key(caps=CAPS + b"!") != base


def test_small_get_attr_tensors_are_keyed_by_value():
    module = torch.nn.Module()
    module.register_buffer("scale", torch.ones(4))
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.mul, (x, graph.get_attr("scale"))))
    gm = fx.GraphModule(module, graph)
    x = [torch.randn(4)]
    before = key(x, gm, frozenset())
    gm.scale.add_(1)
    assert key(x, gm, frozenset()) != before


def test_a_call_module_node_has_no_key():
    gm = fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU()))
    with pytest.raises(Uncacheable, match="call_module"):
        key([torch.randn(3)], gm, frozenset())


def test_a_call_outside_torch_has_no_key():
    def not_torch(t):
        return t

    graph = fx.Graph()
    graph.output(graph.call_function(not_torch, (graph.placeholder("x"),)))
    with pytest.raises(Uncacheable, match="not a torch function"):
        key([torch.randn(3)], fx.GraphModule(torch.nn.Module(), graph), frozenset())


def test_an_input_that_is_neither_tensor_nor_int_has_no_key():
    graph = fx.Graph()
    graph.output(graph.placeholder("x"))
    with pytest.raises(Uncacheable, match="input 0"):
        key(["text"], fx.GraphModule(torch.nn.Module(), graph), frozenset())


def test_a_graph_calling_an_op_packet_has_a_key():
    # Dynamo may call an op packet (torch.ops.aten.x, no overload chosen),
    # which has no .namespace; the key must still read its name.
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten.relu, (x,)))
    gm = fx.GraphModule(torch.nn.Module(), graph)
    inputs = [torch.randn(3)]
    assert key(inputs, gm, constants=frozenset()) == key(inputs, gm, constants=frozenset())
