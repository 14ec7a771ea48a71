"""Weights no compiled graph uses are dropped by the daemon after a grace
period (a long-lived daemon must not keep every model it ever served), and
a client that compiles them again uploads them again."""
from __future__ import annotations

import gc
import time

import torch
import torch.nn as nn

from kiln.connection import get_connection
from kiln.v1 import kiln_pb2


def _stats(kilnd) -> kiln_pb2.StatsResponse:
    return get_connection().stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)


def test_unused_weights_are_dropped_then_uploaded_again(kilnd):
    kilnd.stop()
    kilnd.extra_args = ["--constant-grace-s", "1"]
    kilnd.start()
    try:
        torch._dynamo.reset()
        torch.manual_seed(123)
        model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 8)).eval()
        x = torch.randn(4, 64)
        with torch.no_grad():
            want = model(x)
            compiled = torch.compile(model, backend="kiln")
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
        held = _stats(kilnd)
        assert held.constants >= 4 and held.constant_bytes >= (64 * 256 + 256 * 8) * 4

        # While the compiled graph lives its weights stay, grace or not.
        time.sleep(2.5)
        assert _stats(kilnd).constants == held.constants

        # Every compiled graph gone: the weights go after the grace period.
        del compiled
        torch._dynamo.reset()
        gc.collect()
        get_connection().flush_releases()
        deadline = time.monotonic() + 15
        while _stats(kilnd).constants and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _stats(kilnd).constants == 0
        assert _stats(kilnd).constant_bytes == 0

        # This client still counts them as uploaded; the daemon says they
        # are missing and the client uploads them again.
        with torch.no_grad():
            compiled = torch.compile(model, backend="kiln")
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
        assert _stats(kilnd).constants == held.constants
    finally:
        kilnd.stop()
        kilnd.extra_args = []
        kilnd.start()
        torch._dynamo.reset()
