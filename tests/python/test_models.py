"""End-to-end: models compiled with backend="kiln" against eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from kiln import backend, native


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class WithLogcumsumexp(nn.Module):
    """logcumsumexp is not a daemon op: it must run in eager between two partitions."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.logcumsumexp(torch.relu(self.a(x)), 1))


class NarrowGroupBlock(nn.Module):
    """A ResNeXt bottleneck whose 3x3 convolution has 4 channels a group
    (kilnd's narrow-group kernel), stride 1 then 2."""

    def __init__(self):
        super().__init__()
        self.reduce = nn.Sequential(nn.Conv2d(16, 32, 1, bias=False), nn.BatchNorm2d(32),
                                    nn.ReLU())
        self.grouped = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=8, bias=False),
                                     nn.BatchNorm2d(32), nn.ReLU())
        self.expand = nn.Sequential(nn.Conv2d(32, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.down = nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=4)

    def forward(self, x):
        y = torch.relu(self.expand(self.grouped(self.reduce(x))) + x)
        return self.down(y)


class Decoder(nn.Module):
    """A segmentation-style upsampler: transposed convolutions, one with
    output_padding past its padding, between 2-D convolutions."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
            nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), nn.ReLU(),
            nn.ConvTranspose2d(8, 4, 2, stride=2, output_padding=1, groups=2), nn.Sigmoid())

    def forward(self, x):
        return self.net(x)


class VideoBlock(nn.Module):
    """A 3-D convolution stem with 3-D pooling (video models)."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv3d(3, 8, (3, 5, 5), stride=(1, 2, 2), padding=(1, 2, 2)),
                                  nn.BatchNorm3d(8), nn.ReLU(),
                                  nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)))
        self.head = nn.Sequential(nn.AvgPool3d(2), nn.AdaptiveAvgPool3d(1), nn.Flatten(),
                                  nn.Linear(8, 5))

    def forward(self, x):
        return self.head(self.stem(x))


@pytest.mark.parametrize("make, shape", [(Decoder, (2, 8, 7, 9)), (VideoBlock, (2, 3, 4, 16, 16))])
def test_transposed_and_3d_convolutions_match_eager(daemon_up, make, shape):
    torch.manual_seed(0)
    with torch.inference_mode():
        model = make().eval()
        compiled = torch.compile(model, backend="kiln")
        x = torch.randn(*shape)
        got, want = compiled(x), model(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    s = backend.stats()
    assert s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s


def test_mlp_matches_eager(daemon_up):
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        for batch in (4, 4, 4):
            x = torch.randn(batch, 32)
            got, want = compiled(x), model(x)
            assert got.shape == want.shape and got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    s = backend.stats()
    assert s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s


def test_narrow_group_convolutions_match_eager(daemon_up):
    torch.manual_seed(0)
    model = NarrowGroupBlock().eval()
    for bn in (m for m in model.modules() if isinstance(m, nn.BatchNorm2d)):
        nn.init.uniform_(bn.running_var, 0.5, 2.0)
        nn.init.normal_(bn.running_mean, std=0.1)
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(2, 16, 19, 23)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    s = backend.stats()
    assert s.nodes_in_daemon > 0 and s.nodes_in_eager == 0, s


def test_unsupported_op_runs_in_eager_between_partitions(daemon_up):
    torch.manual_seed(0)
    model = WithLogcumsumexp().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(3, 16)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    s = backend.stats()
    assert s.nodes_in_eager == 1, s          # just logcumsumexp
    assert s.partitions == 2 and s.fallback_partitions == 0, s
    assert s.nodes_in_daemon >= 4, s         # permute+addmm+relu, permute+addmm


@pytest.mark.parametrize("checker", ["native", "python"])
def test_weight_change_after_compile_is_used(daemon_up, monkeypatch, checker):
    if checker == "python":  # the path without the C++ helper (kiln/native.py)
        monkeypatch.setattr(native, "weights_unchanged", None)
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(2, 32)
    with torch.no_grad():
        first = compiled(x)
        torch.testing.assert_close(first, model(x), rtol=1e-5, atol=1e-5)

        # In-place update of one parameter.
        model.net[4].weight.mul_(2.0)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)

        # load_state_dict with fresh values for every parameter.
        other = MLP().eval()
        model.load_state_dict(other.state_dict())
        got = compiled(x)
        torch.testing.assert_close(got, other(x), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(got, first)

        # Replacing a parameter object.
        model.net[0].weight = nn.Parameter(torch.randn(64, 32))
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)

        # Swapping a parameter's storage: `.data =` keeps the object and
        # its version counter, so only the data pointer tells.
        model.net[2].weight.data = torch.randn(64, 64)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        # ... and with another shape (the layer's output grows).
        model.net[4].weight.data = torch.randn(12, 64)
        model.net[4].bias.data = torch.randn(12)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


def test_outputs_are_not_overwritten_by_later_calls(daemon_up):
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    xs = [torch.randn(2, 32) for _ in range(4)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        kept = [o.clone() for o in outs]
        for _ in range(3):
            compiled(torch.randn(2, 32))
        for out, copy, x in zip(outs, kept, xs):
            assert torch.equal(out, copy)
            torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)


def test_non_contiguous_input_and_output_strides(daemon_up):
    torch.manual_seed(0)
    lin = nn.Linear(8, 6).eval()

    def f(x):
        return torch.relu(lin(x.t())).t()

    compiled = torch.compile(f, backend="kiln")
    x = torch.randn(8, 5)
    with torch.no_grad():
        got, want = compiled(x), f(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.shape == want.shape and got.stride() == want.stride()


def test_grad_mode_runs_eager_and_keeps_autograd(daemon_up):
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(2, 32)
    out = compiled(x)   # grad enabled, parameters require grad
    out.sum().backward()
    assert model.net[0].weight.grad is not None
    assert backend.stats().nodes_in_daemon == 0


def test_unknown_option_raises(daemon_up):
    compiled = torch.compile(MLP().eval(), backend="kiln", options={"bogus": 1})
    try:
        with torch.no_grad():
            compiled(torch.randn(1, 32))
    except Exception as e:  # Dynamo wraps backend errors
        assert "bogus" in str(e) and "model_caching" in str(e)
    else:
        raise AssertionError("unknown option accepted")


def test_changing_batch_size_traces_once_more(daemon_up):
    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        for batch in (2, 3, 5, 3):
            x = torch.randn(batch, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    s = backend.stats()
    assert s.nodes_in_eager == 0 and s.eager_graphs == 0, s
    # Batch 2 static, then one dynamic graph that the daemon specializes for
    # 3 and 5 (test_dynamic_shapes.py).
    assert s.graphs == 2, s


def test_rejected_node_moves_to_eager_alone(daemon_up):
    """BatchNorm in training mode: if the daemon rejects it, conv and relu
    still run in the daemon, and the running stats update as in eager."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.Conv2d(8, 4, 3)).train()
    reference = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                              nn.Conv2d(8, 4, 3)).train()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 3, 12, 12)
            torch.testing.assert_close(compiled(x), reference(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(model[1].running_mean, reference[1].running_mean)
    torch.testing.assert_close(model[1].running_var, reference[1].running_var)
    s = backend.stats()
    assert s.fallback_partitions == 0, s
    assert s.nodes_in_daemon >= 3, s  # both convolutions and relu at least


def test_concurrent_calls_from_threads(daemon_up):
    import threading

    torch.manual_seed(0)
    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        compiled(torch.randn(3, 32))
    failures = []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _ in range(25):
                x = torch.randn(3, 32, generator=g)
                if not torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5):
                    failures.append(seed)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert not failures


def test_no_shared_memory_files_left_behind(daemon_up):
    import os

    model = MLP().eval()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        compiled(torch.randn(2, 32))
    mine = [f for f in os.listdir("/dev/shm") if f.startswith(f"kiln-{os.getpid()}-")]
    assert mine == []
