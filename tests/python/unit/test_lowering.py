"""kiln/lowering.py without a daemon: which Dynamo placeholders are weights."""
from __future__ import annotations

import torch
import torch.fx as fx

from kiln.lowering import is_param_or_buffer


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
