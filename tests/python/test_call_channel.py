"""Executes through call channels (shared memory + futex) with the real daemon:
used by default, same answers as eager, off by KILN_CALL_CHANNEL=0, and a
daemon killed in the middle of a call is an error or a transparent restart,
never a hang or a half-finished result."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from testing.daemons import REPO
from testing.models import mlp
from testing.processes import kill_and_wait, wait_for
from kiln import backend, connection


def _channel_calls(kilnd) -> int:
    return connection.get_connection(kilnd.socket).stats().channel_calls


def test_calls_go_through_a_channel_and_match_eager(daemon_up):
    model = mlp()
    compiled = torch.compile(model, backend="kiln")
    xs = [torch.randn(3, 16) for _ in range(5)]
    with torch.no_grad():
        compiled(xs[0])
        before = _channel_calls(daemon_up)
        for x in xs:
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert backend.stats().nodes_in_eager == 0, backend.stats()
    assert _channel_calls(daemon_up) - before == len(xs)
    assert connection.get_connection(daemon_up.socket).stats().channels >= 1


def test_calls_from_several_threads_get_their_own_results(daemon_up):
    model = mlp()
    compiled = torch.compile(model, backend="kiln")
    errors: list[str] = []

    def client(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for _ in range(30):
                x = torch.randn(2, 16, generator=g)
                if not torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5):
                    errors.append(f"thread {seed}: wrong result")

    with torch.no_grad():
        compiled(torch.randn(2, 16))
    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_channels_off_executes_over_grpc(daemon_up):
    code = (
        "import torch, torch.nn as nn\n"
        "from kiln import connection\n"
        "torch.manual_seed(0)\n"
        "m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()\n"
        "c = torch.compile(m, backend='kiln')\n"
        "x = torch.randn(3, 16)\n"
        "conn = connection.get_connection()\n"
        "with torch.no_grad():\n"
        "    c(x)\n"
        "    before = conn.stats()\n"
        "    for _ in range(4):\n"
        "        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)\n"
        "after = conn.stats()\n"
        "print(after.executes - before.executes, after.channel_calls - before.channel_calls)\n")
    env = dict(os.environ, KILN_CALL_CHANNEL="0",
               PYTHONPATH=str(REPO / "client") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    executes, channel_calls = map(int, out.stdout.split()[-2:])
    assert executes == 4 and channel_calls == 0, out.stdout


def _kill_during_call(kilnd, gate, compiled, x):
    """Calls compiled(x) and SIGKILLs the daemon while that call's run is
    held at its test gate: the call cannot finish before the kill, however
    the host schedules the two."""
    pid = kilnd.proc.pid

    def kill_when_held():
        try:
            gate.wait_for_call()
            kill_and_wait(pid)
        finally:
            gate.forget()

    killer = threading.Thread(target=kill_when_held)
    killer.start()
    start = time.monotonic()
    try:
        return compiled(x), time.monotonic() - start, pid
    finally:
        killer.join()


def test_sigkill_mid_call_restarts_and_answers(gated_kilnd):
    d, gate = gated_kilnd
    model = mlp()
    compiled = torch.compile(model, backend="kiln", options={"socket": d.socket})
    x = torch.randn(3, 16)
    with torch.no_grad():
        with gate.open():
            compiled(x)
        assert backend.stats().nodes_in_eager == 0, backend.stats()
        got, elapsed, old_pid = _kill_during_call(d, gate, compiled, x)
        expected = model(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert d.pid() not in (None, old_pid)  # a daemon the client started, without the gate
    assert elapsed < 40, f"recovery took {elapsed:.1f} s"


def test_sigkill_mid_call_without_autostart_raises_promptly(gated_kilnd):
    d, gate = gated_kilnd
    model = mlp()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": d.socket, "autostart": False})
    x = torch.randn(3, 16)
    with torch.no_grad():
        with gate.open():
            compiled(x)
        with pytest.raises(Exception) as info:
            _kill_during_call(d, gate, compiled, x)
    assert d.socket in str(info.value)
    assert d.pid() is None


def test_killed_client_session_and_channels_are_released(daemon_up):
    code = (
        "import sys, time, torch, torch.nn as nn\n"
        "m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()\n"
        "c = torch.compile(m, backend='kiln')\n"
        "with torch.no_grad():\n"
        "    c(torch.randn(3, 16))\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")
    conn = connection.get_connection(daemon_up.socket)
    before = conn.stats()
    env = dict(os.environ,
               PYTHONPATH=str(REPO / "client") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-3000:]
        during = conn.stats()
        assert during.sessions == before.sessions + 1
        assert during.channels == before.channels + 1
        assert during.live_handles > before.live_handles
    finally:
        kill_and_wait(proc.pid)
        proc.communicate()
    # The session leaves the stats first; its shared memory is unlinked just
    # after, so the wait is for both.
    def left_in_shm() -> list:
        return [f for f in os.listdir("/dev/shm") if f.startswith(f"kiln-{proc.pid}-")]

    wait_for(lambda: conn.stats().sessions == before.sessions and not left_in_shm(), 60,
             "the dead client's session and shared memory to go")
    after = conn.stats()
    assert (after.sessions, after.channels, after.live_handles) == \
        (before.sessions, before.channels, before.live_handles)
