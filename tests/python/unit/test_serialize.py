"""kiln/serialize.py without a daemon: a fused partition as the wire's
kiln.v1.Graph, weights as content-hash references."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from kiln import partition, serialize, shm
from kiln.v1 import kiln_pb2

from unit import unit_graphs


def fused_partition() -> fx.GraphModule:
    lowered = unit_graphs.lowered()
    caps = unit_graphs.capabilities(lowered.gm, without=["aten.mul.Tensor"])
    return partition.partition(lowered.gm, caps, views=unit_graphs.NO_VIEWS).fused_0


def test_weights_become_constant_references_and_the_rest_placeholders():
    ser = serialize.serialize(fused_partition(), {1: "a" * 64, 2: "b" * 64})
    kinds = [n.WhichOneof("kind") for n in ser.graph.nodes]
    assert kinds == ["placeholder", "constant", "constant", "call", "call", "call"]
    assert [n.constant.hash for n in ser.graph.nodes if n.HasField("constant")] == [
        "a" * 64, "b" * 64]
    assert ser.tensor_positions == [0]
    assert ser.size_positions == []
    assert not ser.dynamic
    [meta] = ser.input_metas
    assert (meta.dtype, list(meta.shape), list(meta.strides)) == (kiln_pb2.FLOAT32, [3, 8], [8, 1])


def test_calls_name_their_aten_overload_and_reference_earlier_nodes():
    ser = serialize.serialize(fused_partition(), {1: "a" * 64, 2: "b" * 64})
    calls = [(i, n.call) for i, n in enumerate(ser.graph.nodes) if n.HasField("call")]
    assert [c.target for _, c in calls] == [
        "aten.permute.default", "aten.addmm.default", "aten.relu.default"]
    for index, call in calls:
        for arg in call.args:
            if arg.HasField("node"):
                assert arg.node.node < index


def test_the_output_is_the_last_call_with_eagers_metadata():
    ser = serialize.serialize(fused_partition(), {1: "a" * 64, 2: "b" * 64})
    assert ser.single_output
    [out] = ser.graph.outputs
    assert (out.node, out.output) == (len(ser.graph.nodes) - 1, 0)
    [val] = ser.output_vals
    assert (tuple(val.shape), val.dtype) == ((3, 4), torch.float32)


def test_without_hashes_every_tensor_is_a_per_call_input():
    ser = serialize.serialize(fused_partition(), {})
    assert ser.tensor_positions == [0, 1, 2]
    assert [list(m.shape) for m in ser.input_metas] == [[3, 8], [4, 8], [4]]
    assert [shm.torch_dtype(m.dtype) for m in ser.input_metas] == [torch.float32] * 3


def test_a_graph_returning_its_input_has_no_wire_form():
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2)
    graph.output(x)
    with pytest.raises(serialize.SerializationError, match="is an input"):
        serialize.serialize(fx.GraphModule(torch.nn.Module(), graph), {})


def test_a_call_that_is_not_an_aten_overload_has_no_wire_form():
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(2)
    y = graph.call_function(torch.relu, (x,))
    y.meta["val"] = torch.empty(2)
    graph.output(y)
    with pytest.raises(serialize.SerializationError, match="not an ATen overload"):
        serialize.serialize(fx.GraphModule(torch.nn.Module(), graph), {})


def test_a_memory_format_without_a_wire_form_is_a_serialization_error():
    # channels_last_3d has no wire value: the partition must fall back to
    # eager (SerializationError), not fail the compile.
    graph = fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(1, 2, 2, 2, 2)
    y = graph.call_function(torch.ops.aten.clone.default, (x,),
                            {"memory_format": torch.channels_last_3d})
    y.meta["val"] = torch.empty(1, 2, 2, 2, 2)
    graph.output(y)
    with pytest.raises(serialize.SerializationError, match="memory format"):
        serialize.serialize(fx.GraphModule(torch.nn.Module(), graph), {})
