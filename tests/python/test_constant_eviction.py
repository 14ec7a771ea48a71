"""Weights the daemon no longer needs are dropped after a grace period (a
long-lived daemon must not keep every model it ever served, nor a second
copy of weights it has packed), and a client that compiles them again
uploads them again."""
from __future__ import annotations

import gc

import torch
import torch.nn as nn

from kiln.connection import get_connection
from testing.processes import wait_for

# Seconds an unused weight is kept. Nothing here depends on what happens
# within them: the checks read cumulative counters or wait for a drop.
GRACE_S = 3
# The linears' weights, which only the compile reads (it packs them).
LINEAR_WEIGHT_BYTES = (64 * 256 + 256 * 8) * 4


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
        # What was uploaded, however much of it the grace has dropped since.
        uploaded = kilnd.stats().constant_bytes_uploaded
        assert uploaded >= LINEAR_WEIGHT_BYTES

        # The compiled graph lives on, reading only its packed weights and
        # the offset: the uploaded linear weights go after the grace period.
        wait_for(lambda: kilnd.stats().constants == 1, 60, "the unused weights to be dropped")
        kept = kilnd.stats()
        assert kept.constants == 1 and kept.constant_bytes == 8 * 4
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)

        # Every compiled graph gone: the offset goes too.
        del compiled
        torch._dynamo.reset()
        gc.collect()
        get_connection().flush_releases()
        wait_for(lambda: kilnd.stats().constants == 0, 60, "the offset to be dropped")
        assert kilnd.stats().constant_bytes == 0

        # This client still counts them as uploaded; the daemon says they
        # are missing and gets them back: uploaded again, or read from the
        # cache directory (counters that only grow, read at any time).
        def brought_back() -> int:
            s = kilnd.stats()
            return s.constant_bytes_uploaded + s.constant_bytes_from_cache

        before = brought_back()
        with torch.no_grad():
            compiled = torch.compile(model, backend="kiln")
            torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
        assert brought_back() > before
    finally:
        kilnd.stop()
        kilnd.extra_args = []
        kilnd.start()
        torch._dynamo.reset()


def test_a_daemon_that_does_not_know_report_missing_gets_every_weight(daemon_up, monkeypatch):
    """A daemon older than CompileRequest.report_missing ignores the field
    and refuses a compile whose weights it lacks: the client then uploads
    them all and compiles again. The real daemon is shown each request as
    such a daemon would read it (the field cleared)."""
    conn = get_connection(daemon_up.socket)
    conn.connect()
    conn.reconnect(conn.generation)  # a fresh session: an earlier test restarts the daemon
    compile_rpc = conn.stub.Compile
    seen = []

    def without_report_missing(request, **kwargs):
        seen.append(request.report_missing)
        old = type(request)()
        old.CopyFrom(request)
        old.ClearField("report_missing")
        return compile_rpc(old, **kwargs)

    monkeypatch.setattr(conn.stub, "Compile", without_report_missing)
    torch.manual_seed(4321)  # weights new to the daemon
    model, x = MlpWithOffset().eval(), torch.randn(4, 64)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend="kiln")(x), model(x))
    # Asked with the flag, refused, then every weight and a plain compile.
    assert seen == [True, False], seen
