"""The `kiln` command line."""
from __future__ import annotations

import os

import torch

from kiln import cli
from testing.daemons import Kilnd
from testing.processes import stop_process


def test_status_prints_daemon_stats(daemon_up, capsys):
    assert cli.main(["--socket", daemon_up.socket, "status"]) == 0
    out = capsys.readouterr().out
    assert daemon_up.socket in out and "graphs compiled" in out and "specializations" in out


def test_status_lists_this_client_and_its_memory(daemon_up, capsys):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval()
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        compiled(torch.randn(2, 8))
    assert cli.main(["--socket", daemon_up.socket, "status"]) == 0
    out = capsys.readouterr().out
    mine = [line for line in out.splitlines() if f"pid {os.getpid()} " in line]
    assert mine and "0 handles" not in mine[0], out
    assert "hit rate" in out and "plans of" in out and "packed weights" in out
    assert "MiB cap)" in out  # the cache's size against its cap (2048 MiB by default)


def test_status_without_daemon_fails_naming_socket(tmp_path, capsys):
    socket = str(tmp_path / "none.sock")
    assert cli.main(["--socket", socket, "status"]) == 1
    assert socket in capsys.readouterr().err


def test_stop_ends_a_daemon_that_does_not_answer(tmp_path, capsys):
    # A stopped kilnd holds its socket's lock but answers nothing: `kiln
    # stop` finds it through the lock file rather than asking it. Every
    # thread is stopped before `kiln stop` asks, so none can answer.
    d = Kilnd(tmp_path, ["--no-cache"], cache_dir=False)
    d.start()
    try:
        stop_process(d.proc.pid)
        assert cli.main(["--socket", d.socket, "stop"]) == 0
        assert "does not answer" in capsys.readouterr().out
        assert d.proc.wait(timeout=30) == 0  # SIGTERM's clean shutdown
        assert not os.path.exists(d.socket) and not os.path.exists(d.socket + ".lock")
        # With nothing left, stop says so.
        assert cli.main(["--socket", d.socket, "stop"]) == 0
        assert "not running" in capsys.readouterr().out
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
