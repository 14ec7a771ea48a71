"""A handful of models from PyTorch's TIMM benchmark list (the whole list
runs from `make bench-suites`), built as bench/suites/timm_suite.py builds
them: `timm.create_model(name, pretrained=False)` at the model's own input
size, batch 1. Each must give eager's answer through backend="kiln"
(max |kiln - eager| <= 1e-3 * max |eager|, bench/models' tolerance) with
every ATen node in the daemon.

They are the models whose ops once kept nodes in eager: leaky_relu
(cspdarknet53), 1-D convolution and unfold (eca_halonext26ts), batch norm
over the batch's statistics for weight standardization (dm_nfnet_f0), a
sum over dims and a number minus a tensor (convit_base).
"""
from __future__ import annotations

import pytest
import torch

import kiln

timm = pytest.importorskip("timm")

REL_TOL = 1e-3
MODELS = ("cspdarknet53", "eca_halonext26ts", "dm_nfnet_f0", "convit_base")


@pytest.mark.parametrize("name", MODELS)
def test_timm_suite_model_runs_wholly_in_the_daemon(daemon_up, name):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False).eval()
    channels, height, width = model.pretrained_cfg["input_size"]
    x = torch.randn(1, channels, height, width)
    with torch.no_grad():
        want = model(x)
        report = kiln.explain(model, x)
    eager = sorted({f"{f.target} ({f.reason})" for f in report.fallbacks})
    assert report.nodes_in_eager == 0, f"{name}: nodes in eager: {eager}"
    assert report.nodes_in_daemon > 0
    err = ((report.output - want).abs().max() / want.abs().max()).item()
    assert err <= REL_TOL, f"{name}: max relative difference {err:.2e}"
