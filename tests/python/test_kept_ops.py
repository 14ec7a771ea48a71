"""Ops the lowering keeps whole (lowering.py's decomposition table) reach the
real daemon whole and give eager's answer."""
from __future__ import annotations

import torch

import kiln


class EdgeWrite(torch.nn.Module):
    """Writes one index of a dim, as Longformer writes its windows' edges:
    functionalized, an aten.select_scatter."""

    def forward(self, x, y):
        x = x * 2
        x[:, -1] = y + 1
        return x.relu()


def test_select_scatter_runs_whole_in_the_daemon(daemon_up, tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    x, y = torch.randn(3, 7, 11), torch.randn(3, 11)
    model = EdgeWrite()
    with torch.no_grad():
        report = kiln.explain(model, x, y)
        torch.testing.assert_close(report.output, model(x, y), rtol=0, atol=0)
    (graph,) = report.graphs
    assert graph.nodes_in_eager == 0, str(report)
    dumped = "".join(p.read_text() for p in tmp_path.glob("*.txt"))
    # Not core ATen's decomposition: a where over an arange and the
    # source expanded to the whole tensor.
    assert "aten.select_scatter.default" in dumped, dumped
    assert "aten.where" not in dumped and "aten.arange" not in dumped, dumped


class BlockedAttention(torch.nn.Module):
    """Attention over 5-D [B, heads, blocks, tokens, dim] tensors with a
    boolean mask, as timm's Nest computes it: PyTorch's math attention,
    whose softmax is aten._safe_softmax (a row whose keys are all masked
    gives zeros, not NaN)."""

    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_safe_softmax_runs_whole_in_the_daemon(daemon_up, tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    q, k, v = (torch.randn(2, 3, 4, 10, 16) for _ in range(3))
    mask = torch.rand(10, 10) > 0.3
    mask[2] = False  # query 2 sees no key: zeros
    model = BlockedAttention()
    with torch.no_grad():
        want = model(q, k, v, mask)
        assert torch.all(want[..., 2, :] == 0)
        report = kiln.explain(model, q, k, v, mask)
        torch.testing.assert_close(report.output, want, rtol=1e-5, atol=1e-6)
    (graph,) = report.graphs
    assert graph.nodes_in_eager == 0, str(report)
    dumped = "".join(p.read_text() for p in tmp_path.glob("*.txt"))
    assert "aten._safe_softmax.default" in dumped, dumped
    assert "aten.any" not in dumped and "aten.full_like" not in dumped, dumped
