"""Dict-tag guards for Kiln's frames (client/kiln/guards.py), against a real
kilnd: set only while Dynamo compiles a Kiln frame, and the answers stay
eager's through every kind of weight change the skipped guards would have
caught."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo.guards as dynamo_guards
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.a(x))))


@pytest.fixture
def tag_root_searches(monkeypatch):
    """How many frames Dynamo built with dict-tag guards (it looks for
    tag-safe roots only then)."""
    seen = []
    search = dynamo_guards.GuardManagerWrapper.find_tag_safe_roots

    def counting(self):
        seen.append(1)
        return search(self)
    monkeypatch.setattr(dynamo_guards.GuardManagerWrapper, "find_tag_safe_roots", counting)
    torch._dynamo.reset()
    yield seen
    torch._dynamo.reset()


@pytest.mark.parametrize("enabled", [True, False])
def test_set_for_kiln_frames_only(daemon_up, tag_root_searches, enabled):
    assert torch._dynamo.config.use_recursive_dict_tags_for_guards is False
    model = Net().eval()
    compiled = torch.compile(model, backend="kiln", options={"dict_tag_guards": enabled})
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert len(tag_root_searches) == (1 if enabled else 0)
    # Put back when the compile ended: another backend's frame is untouched.
    assert torch._dynamo.config.use_recursive_dict_tags_for_guards is False
    other = torch.compile(nn.Linear(4, 4), backend="eager")
    other(torch.randn(2, 4))
    assert len(tag_root_searches) == (1 if enabled else 0)


def test_every_weight_change_still_reaches_the_answer(daemon_up, tag_root_searches):
    torch.manual_seed(0)
    model = Net().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(4, 16)

    def check():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)

    with torch.no_grad():
        check()
        assert tag_root_searches, "the frame was not built with dict-tag guards"
        model.a.weight.mul_(3.0)                          # in place: version bump
        check()
        model.a.weight.data = torch.randn(32, 16)         # storage swap, same object
        check()
        model.b.weight.data = torch.randn(5, 32)          # storage swap, new shape
        model.b.bias.data = torch.randn(5)
        check()
        model.b = nn.Linear(32, 6)                        # swapped submodule
        check()
        model.a.bias = None                               # attribute set to None
        check()
    model.train()                                         # dropout now random: shape only
    with torch.no_grad():
        assert compiled(x).shape == model(x).shape
        model.eval()
        check()


def test_unfreezing_weights_after_an_inference_compile(daemon_up, tag_root_searches):
    torch.manual_seed(0)
    model = Net().eval().requires_grad_(False)
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(4, 16)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert tag_root_searches
    # requires_grad_ changes no attribute dict: only the backend's own
    # per-call check sends this call to autograd.
    model.a.weight.requires_grad_(True)
    compiled(x).sum().backward()
    assert model.a.weight.grad is not None
