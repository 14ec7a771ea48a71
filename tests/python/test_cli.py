"""The `kiln` command line."""
from __future__ import annotations

import os

import torch

from kiln import cli


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
