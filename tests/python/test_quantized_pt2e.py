"""Graphs quantized by PyTorch's PT2E flow (torchao's prepare_pt2e and
convert_pt2e with X86InductorQuantizer, exported with strict=True as torch
2.14 needs) run wholly in the daemon: their quantize and dequantize ops
included, with a model built and called under no_grad and under
inference_mode. The answer is the quantized model's in eager within one
quantization step: an f32 convolution that differs from eager's in its
last bit may put a value on the other side of a rounding boundary."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import kiln

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
xiq = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")


def _quantized(model: nn.Module, x: torch.Tensor) -> torch.fx.GraphModule:
    exported = torch.export.export(model, (x,), strict=True).module()
    quantizer = xiq.X86InductorQuantizer()
    quantizer.set_global(xiq.get_default_x86_inductor_quantization_config())
    prepared = pt2e.prepare_pt2e(exported, quantizer)
    prepared(x)  # calibration
    return pt2e.convert_pt2e(prepared)


def _last_scale(gm: torch.fx.GraphModule) -> float:
    """The scale of the last activation the graph quantizes."""
    q = [n for n in gm.graph.nodes
         if n.target is torch.ops.quantized_decomposed.quantize_per_tensor.default]
    return float(q[-1].args[1])


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_quantized_cnn_runs_in_the_daemon_within_one_step(daemon_up, mode):
    torch.manual_seed(0)
    context = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with context():
        # Ends at a pooling of quantized values: the output lies on the
        # last quantization grid, so differences are whole steps.
        model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                              nn.MaxPool2d(2)).eval()
        with torch.no_grad():
            model[1].running_mean.uniform_(-0.2, 0.2)
            model[1].running_var.uniform_(0.5, 2.0)
        x = torch.randn(2, 3, 16, 16)
        gm = _quantized(model, x)
        want = gm(x)
        report = kiln.explain(gm, x)
        compiled = torch.compile(gm, backend="kiln")
        got = compiled(x)
        again = compiled(x + 0.01)
        want_again = gm(x + 0.01)
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "quantized_decomposed.quantize_per_tensor.default" in ops, ops
    assert "quantized_decomposed.dequantize_per_channel.default" in ops, ops
    assert report.nodes_in_eager == 0 and report.partitions == 1, str(report)
    step = _last_scale(gm)
    for out, ref in ((got, want), (again, want_again)):
        steps = (out - ref).abs() / step
        assert steps.max().item() <= 1.0 + 1e-4, steps.max().item()
        # A boundary case, not the rule: nearly every element is eager's.
        assert (steps > 0.5).float().mean().item() < 0.01
        # On the grid, as eager's values are.
        assert torch.allclose(out / step, torch.round(out / step), atol=1e-3)


def test_a_quantized_linear_model_runs_in_the_daemon(daemon_up):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        gm = _quantized(model, x)
        want = gm(x)
        report = kiln.explain(gm, x)
        got = torch.compile(gm, backend="kiln")(x)
        # The output is the last linear's, in f32: one step of its input's
        # quantization moves it by at most step * max |row of the weight|_1.
        bound = _last_scale(gm) * float(model[2].weight.abs().sum(dim=1).max())
    assert report.nodes_in_eager == 0, str(report)
    assert (got - want).abs().max().item() <= bound, bound
    assert (got - want).abs().max().item() <= 1e-2 * want.abs().max().item()
