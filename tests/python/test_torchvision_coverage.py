"""Torchvision models run whole in the daemon: zero fallbacks, eager accuracy.

Every FX node of each model (random weights, eval, fp32) must run in kilnd
(backend.stats().nodes_in_eager == 0, no rejected partitions), and the
output must match eager within

    max |kiln - eager| <= 1e-3 * max |eager|

(a relative-to-the-output tolerance: long fp32 chains of convolutions and
matmuls reorder sums differently from eager, so elementwise rtol is too
strict for outputs near zero).

The default run is a subset at batch 1 that between them use every op
family the list needs (convolution/batch norm/pooling, cat/split/clone
shuffles, hardswish (clamp/div/mul), squeeze-excitation (mean/sigmoid/mul),
layer norm/gelu/mm/permute, and swin's roll/pad/slice_scatter/index/bmm/
softmax mask arithmetic). KILN_FULL_COVERAGE=1 runs all sixteen models at
batch 1 and 8.
"""
from __future__ import annotations

import os

import pytest
import torch
import torchvision

from kiln import backend

ALL_MODELS = [
    "resnet18", "resnet50", "resnext50_32x4d", "alexnet", "vgg16", "squeezenet1_1",
    "mobilenet_v2", "mobilenet_v3_large", "mnasnet1_0", "shufflenet_v2_x1_0",
    "densenet121", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny", "vit_b_16",
    "swin_t",
]
DEFAULT_MODELS = ["resnet18", "squeezenet1_1", "shufflenet_v2_x1_0", "mobilenet_v3_large",
                  "efficientnet_b0", "convnext_tiny", "swin_t"]
FULL = os.environ.get("KILN_FULL_COVERAGE", "").lower() in ("1", "true", "yes", "on")
RELATIVE_TOLERANCE = 1e-3


def _cases() -> list:
    if FULL:
        return [(m, b) for m in ALL_MODELS for b in (1, 8)]
    return [(m, 1) for m in DEFAULT_MODELS]


def _model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    # torchvision zero-initialises vit's classifier head, which would make
    # the output identically zero and the comparison vacuous.
    if name == "vit_b_16":
        torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    return model


@pytest.mark.parametrize("name,batch", _cases(), ids=lambda v: str(v))
def test_model_runs_whole_in_daemon_and_matches_eager(daemon_up, name, batch):
    model = _model(name)
    x = torch.randn(batch, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
    stats = backend.stats()
    assert stats.nodes_in_daemon > 0, stats
    assert stats.nodes_in_eager == 0, stats
    assert stats.fallback_partitions == 0 and stats.eager_graphs == 0, stats
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = want.abs().max().item()
    assert scale > 0
    diff = (got - want).abs().max().item()
    assert diff <= RELATIVE_TOLERANCE * scale, (
        f"{name} batch {batch}: max abs diff {diff:.3e} > {RELATIVE_TOLERANCE} x {scale:.3e}")
