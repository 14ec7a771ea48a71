"""resnet18 runs entirely in the daemon and matches eager."""
from __future__ import annotations

import torch
import torchvision

from kiln import backend


def test_resnet18_all_nodes_in_daemon(daemon_up):
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        got = compiled(x)
        want = model(x)
        again = compiled(x)
    s = backend.stats()
    assert s.nodes_in_eager == 0 and s.fallback_partitions == 0, s
    assert s.partitions == 1 and s.nodes_in_daemon >= 70, s
    assert got.shape == want.shape == (1, 1000)
    assert (got - want).abs().max().item() <= 1e-3
    assert torch.equal(got, again)
