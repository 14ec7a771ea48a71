"""Weights the daemon no longer needs are dropped after a grace period (a
long-lived daemon must not keep every model it ever served, nor a second
copy of weights it has packed), and a client that compiles them again
uploads them again."""
from __future__ import annotations

import gc
import time

import torch
import torch.nn as nn

from kiln.connection import get_connection
from kiln.v1 import kiln_pb2

# Long enough that compiling, running and reading the stats fit in it on a
# loaded machine (the held counts are read before the grace runs out).
GRACE_S = 3


def _stats() -> kiln_pb2.StatsResponse:
    return get_connection().stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)


def _wait_for(predicate, timeout_s: float = 30.0) -> kiln_pb2.StatsResponse:
    deadline = time.monotonic() + timeout_s
    while True:
        s = _stats()
        if predicate(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.2)


class MlpWithOffset(nn.Module):
    """Two linears (their weights and biases are packed or copied into the
    kernels at compile time) and an offset every run reads."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8))
        self.register_buffer("offset", torch.linspace(-1, 1, 8))

    def forward(self, x):
        return self.mlp(x) * 2.0 + self.offset


def test_weights_not_read_at_run_time_are_dropped_then_uploaded_again(kilnd):
    kilnd.stop()
    kilnd.extra_args = ["--constant-grace-s", str(GRACE_S)]
    kilnd.start()
    try:
        torch._dynamo.reset()
        torch.manual_seed(123)
        model = MlpWithOffset().eval()
        x = torch.randn(4, 64)
        with torch.no_grad():
            want = model(x)
            compiled = torch.compile(model, backend="kiln")
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
        held = _stats()
        assert held.constants >= 5 and held.constant_bytes >= (64 * 256 + 256 * 8) * 4

        # The compiled graph lives on, reading only its packed weights and
        # the offset: the uploaded linear weights go after the grace period.
        kept = _wait_for(lambda s: s.constants == 1)
        assert kept.constants == 1 and kept.constant_bytes == 8 * 4
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)

        # Every compiled graph gone: the offset goes too.
        del compiled
        torch._dynamo.reset()
        gc.collect()
        get_connection().flush_releases()
        gone = _wait_for(lambda s: s.constants == 0)
        assert gone.constants == 0 and gone.constant_bytes == 0

        # This client still counts them as uploaded; the daemon says they
        # are missing and the client uploads them again.
        with torch.no_grad():
            compiled = torch.compile(model, backend="kiln")
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
        assert _stats().constants == held.constants
    finally:
        kilnd.stop()
        kilnd.extra_args = []
        kilnd.start()
        torch._dynamo.reset()
