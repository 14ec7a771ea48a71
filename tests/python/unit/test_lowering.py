"""kiln/lowering.py without a daemon: which Dynamo placeholders are
weights, and which of torch.export's metadata assertions go."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln.lowering import drop_proven_asserts, is_param_or_buffer


def _placeholder(name: str) -> fx.Node:
    return fx.Graph().placeholder(name)


def test_placeholders_without_a_grapharg_are_weights_by_their_flattened_source():
    """torch's aot_compile hands over placeholders without GraphArgs."""
    plain = torch.zeros(2)
    assert is_param_or_buffer(_placeholder("L_model_modules_bn1_buffers_running_mean_"), plain)
    assert is_param_or_buffer(_placeholder("L_self_modules_fc_parameters_weight_"), plain)
    assert is_param_or_buffer(_placeholder("G_net_modules_0_parameters_bias_"), plain)
    assert not is_param_or_buffer(_placeholder("L_x_"), plain)
    assert not is_param_or_buffer(_placeholder("L_inputs_0_"), plain)
    assert not is_param_or_buffer(_placeholder("my_buffers_x"), plain)
    assert is_param_or_buffer(_placeholder("L_x_"), torch.nn.Parameter(plain))


def _asserting(**checks) -> fx.GraphModule:
    """x (f32 [2, 3]) -> _assert_tensor_metadata(x, **checks) -> x * 2."""
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2, 3)
    g.call_function(torch.ops.aten._assert_tensor_metadata.default, (x,), checks)
    g.output(g.call_function(torch.ops.aten.mul.Tensor, (x, 2)))
    return fx.GraphModule(torch.nn.Module(), g)


def test_metadata_assertions_go_only_when_the_traced_value_meets_them():
    assertion = torch.ops.aten._assert_tensor_metadata.default
    for holds in ({"dtype": torch.float32}, {"size": [2, 3], "stride": [3, 1]},
                  {"dtype": torch.float32, "device": torch.device("cpu"),
                   "layout": torch.strided}, {}):
        gm = _asserting(**holds)
        assert drop_proven_asserts(gm) == 1, holds
        assert all(n.target is not assertion for n in gm.graph.nodes)
    for fails in ({"dtype": torch.int64}, {"size": [3, 2]}, {"stride": [1, 2]},
                  {"dtype": torch.float32, "size": [2, 4]}):
        gm = _asserting(**fails)
        assert drop_proven_asserts(gm) == 0, fails
        assert any(n.target is assertion for n in gm.graph.nodes)
