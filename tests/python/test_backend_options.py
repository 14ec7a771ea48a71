"""Every backend option has an effect, checked against the real daemon."""
from __future__ import annotations

import os
import shutil
import signal
import tempfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from testing.models import mlp
from testing.processes import kill_and_wait
from kiln import backend, connection


def _run(model, options, x):
    compiled = torch.compile(model, backend="kiln", options=options)
    with torch.no_grad():
        return compiled(x)


@pytest.mark.parametrize("disabled", [[torch.ops.aten.relu], ["aten.relu.default"],
                                      "aten.relu"])
def test_disabled_ops_stay_in_eager(daemon_up, disabled):
    model, x = mlp(), torch.randn(3, 16)
    got = _run(model, {"disabled_ops": disabled}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    stats = backend.stats()
    assert stats.nodes_in_eager == 1 and stats.partitions == 2, stats


def test_min_partition_size_keeps_small_partitions_in_eager(daemon_up):
    model, x = mlp(), torch.randn(3, 16)
    got = _run(model, {"disabled_ops": ["aten.relu"], "min_partition_size": 100}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    stats = backend.stats()
    assert stats.partitions == 0 and stats.nodes_in_daemon == 0, stats


def test_partition_of_views_alone_stays_in_eager(daemon_up):
    """The daemon's capabilities mark views (ops.def's kView trait); a
    partition of nothing else is not worth a call, one with a mul is."""
    def views_only(x):
        return torch.relu(torch.relu(x).view(4, 8).t())

    def with_compute(x):
        return torch.relu(torch.relu(x).view(4, 8).t() * 2)

    x = torch.randn(32)
    for f, partitions in ((views_only, 0), (with_compute, 1)):
        torch._dynamo.reset()
        backend.reset_stats()
        got = _run(f, {"disabled_ops": ["aten.relu"]}, x)
        torch.testing.assert_close(got, f(x))
        stats = backend.stats()
        assert stats.partitions == partitions, (f.__name__, stats)


def test_fallback_error_raises_naming_node_and_reason(daemon_up):
    def f(x):
        return torch.logcumsumexp(torch.relu(x), 0) + 1

    with pytest.raises(Exception) as info:
        _run(f, {"fallback": "error"}, torch.randn(8))
    message = str(info.value)
    assert "logcumsumexp" in message and "unsupported op" in message, message
    # The default falls back and gives eager's answer.
    x = torch.randn(8)
    torch.testing.assert_close(_run(f, {}, x), f(x))


def test_fallback_error_raises_for_graphs_needing_grad(daemon_up):
    model = mlp().train()
    compiled = torch.compile(model, backend="kiln", options={"fallback": "error"})
    with pytest.raises(Exception, match="aot_autograd"):
        compiled(torch.randn(3, 16, requires_grad=True))


def test_unknown_device_lists_the_daemons(daemon_up):
    with pytest.raises(Exception) as info:
        _run(mlp(), {"device": "GPU"}, torch.randn(3, 16))
    assert "GPU" in str(info.value) and "CPU" in str(info.value)
    torch.testing.assert_close(_run(mlp(), {"device": "cpu"}, torch.randn(3, 16)).shape,
                               torch.Size([3, 4]))


def test_extra_decompositions_are_applied(daemon_up):
    model, x = mlp(), torch.randn(3, 16)
    _run(model, {}, x)
    plain = backend.stats().nodes_in_daemon
    torch._dynamo.reset()
    backend.reset_stats()
    got = _run(model, {"decompositions": [torch.ops.aten.addmm.default]}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert backend.stats().nodes_in_daemon > plain, (plain, backend.stats())
    with pytest.raises(Exception, match="no decomposition"):
        torch._dynamo.reset()
        _run(model, {"decompositions": ["aten.mm.default"]}, x)


class _GridSampleHead(nn.Module):
    """grid_sample, which the daemon runs through its decomposition only."""

    def forward(self, x):
        theta = torch.tensor([[[0.9, 0.1, 0.0], [-0.1, 0.8, 0.1]]]).expand(x.shape[0], 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        return F.grid_sample(torch.relu(x), grid, align_corners=False) * 2.0


def test_auto_decompose_runs_ops_the_daemon_lacks_through_their_decomposition(daemon_up):
    model, x = _GridSampleHead(), torch.randn(2, 3, 8, 8)
    got = _run(model, {}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert backend.stats().nodes_in_eager == 0, backend.stats()
    torch._dynamo.reset()
    backend.reset_stats()
    got = _run(model, {"auto_decompose": False}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    assert backend.stats().nodes_in_eager >= 1, backend.stats()


def test_timeout_bounds_a_call_and_the_next_call_works(gated_kilnd):
    # The run waits at the daemon's test gate, so it cannot finish within
    # any timeout; let go afterwards, it must not spoil the next call.
    d, gate = gated_kilnd
    model, x = mlp(), torch.randn(3, 16)
    options = {"socket": d.socket, "autostart": False}
    with torch.no_grad():
        with gate.open():  # compiled, so the call below only runs
            torch.compile(model, backend="kiln", options=options)(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="kiln", options={**options, "timeout": 0.5})
        with pytest.raises(Exception, match="DEADLINE_EXCEEDED|in time"):
            compiled(x)
        gate.release()
        torch._dynamo.reset()
        again = torch.compile(model, backend="kiln", options=options)
        with gate.open():
            torch.testing.assert_close(again(x), model(x), rtol=1e-4, atol=1e-4)


def test_cache_dir_is_given_to_a_daemon_the_client_starts(daemon_up):
    workdir = tempfile.mkdtemp(prefix="kc-", dir="/tmp")
    socket = os.path.join(workdir, "kilnd.sock")
    cache = os.path.join(workdir, "my-cache")
    model, x = mlp(), torch.randn(3, 16)
    got = _run(model, {"socket": socket, "cache_dir": cache}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    stats = connection.get_connection(socket).stats()
    try:
        assert os.path.realpath(stats.cache_dir) == os.path.realpath(cache)
        assert os.path.isdir(cache)
    finally:
        kill_and_wait(stats.pid, signal.SIGTERM)
        shutil.rmtree(workdir, ignore_errors=True)


def _train(model, compiled, steps=4, seed=0):
    torch.manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, *model.input_shape)
        y = torch.randint(0, 4, (8,))
        loss = F.cross_entropy(compiled(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class _MLP(nn.Module):
    input_shape = (16,)

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class _CNN(nn.Module):
    input_shape = (3, 16, 16)

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@pytest.mark.parametrize("cls", [_MLP, _CNN])
def test_aot_autograd_training_matches_eager(daemon_up, cls):
    torch.manual_seed(0)
    eager = cls()
    compiled_model = cls()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model, backend="kiln", options={"aot_autograd": True})
    want = _train(eager, eager)
    got = _train(compiled_model, compiled)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-5)
    for (name, a), b in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5, msg=name)
    assert backend.stats().nodes_in_daemon > 0, backend.stats()


def test_aot_autograd_inference_keeps_weights_as_constants(daemon_up):
    model, x = mlp(), torch.randn(3, 16)
    conn = connection.get_connection(daemon_up.socket)
    got = _run(model, {"aot_autograd": True}, x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    stats = backend.stats()
    assert stats.nodes_in_daemon > 0 and stats.nodes_in_eager == 0, stats
    # The weights were uploaded as constants (4 tensors: 2 weights, 2 biases).
    hashes = [connection.sha256_of(p) for p in model.parameters()]
    assert all(h in conn._present for h in hashes)


def test_aot_autograd_graph_with_tensor_literal(daemon_up):
    # AOTAutograd calls its compilers under its fake mode; the literal is a
    # real tensor constant of the graph and must stay one (regression: the
    # partitioner's copy of the graph failed on it, breaking transformers'
    # generate, whose cache starts as torch.tensor([])).
    model, x = mlp(), torch.randn(3, 16)

    def fn(x):
        return model(x) * torch.tensor([2.0, 3.0, 4.0, 5.0])

    with torch.no_grad():
        got = torch.compile(fn, backend="kiln", options={"aot_autograd": True})(x)
        torch.testing.assert_close(got, fn(x))
    stats = backend.stats()
    assert stats.graphs == 1 and stats.nodes_in_daemon > 0, stats
