"""The daemon dying between two calls: restart and retry, or a clear error."""
from __future__ import annotations

import signal
import time

import pytest
import torch
import torch.nn as nn

from testing.processes import kill_and_wait
from kiln import backend


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()


def test_sigkill_between_calls_restarts_daemon(daemon_up):
    model = _model()
    compiled = torch.compile(model, backend="kiln")
    x = torch.randn(2, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        assert backend.stats().nodes_in_eager == 0, backend.stats()
        old_pid = daemon_up.pid()
        assert old_pid is not None
        assert kill_and_wait(old_pid)

        start = time.monotonic()
        got = compiled(x)
        elapsed = time.monotonic() - start
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    new_pid = daemon_up.pid()
    assert new_pid is not None and new_pid != old_pid
    assert elapsed < 40, f"restart took {elapsed:.1f} s"


def test_sigkill_with_autostart_off_raises_naming_socket(daemon_up):
    model = _model()
    compiled = torch.compile(model, backend="kiln", options={"autostart": False})
    x = torch.randn(2, 16)
    with torch.no_grad():
        compiled(x)
        assert backend.stats().nodes_in_eager == 0, backend.stats()
        assert kill_and_wait(daemon_up.pid())
        start = time.monotonic()
        with pytest.raises(Exception) as info:
            compiled(x)
        elapsed = time.monotonic() - start
    assert daemon_up.socket in str(info.value)
    assert elapsed < 15, f"failing took {elapsed:.1f} s"
    assert daemon_up.pid() is None  # nothing restarted it


def test_concurrent_autostart_ends_with_one_daemon(kilnd, tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from testing.processes import kill_and_wait

    workdir = tempfile.mkdtemp(prefix="ka-", dir="/tmp")
    socket = os.path.join(workdir, "kilnd.sock")
    env = dict(os.environ, KILN_SOCKET=socket, KILN_CACHE_DIR=str(tmp_path / "cache"))
    code = ("from kiln.connection import get_connection\n"
            "c = get_connection(); c.connect(); print(c.stats().pid)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    pids = set()
    try:
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err
            pids.add(int(out.strip()))
        assert len(pids) == 1, pids
        log = open(os.path.join(workdir, "kilnd.log")).read()
        assert log.count("ready on") == 1, log
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for pid in pids:
            kill_and_wait(pid, signal.SIGTERM)
        shutil.rmtree(workdir, ignore_errors=True)
