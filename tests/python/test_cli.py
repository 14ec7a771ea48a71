"""The `kiln` command line."""
from __future__ import annotations

from kiln import cli


def test_status_prints_daemon_stats(daemon_up, capsys):
    assert cli.main(["--socket", daemon_up.socket, "status"]) == 0
    out = capsys.readouterr().out
    assert daemon_up.socket in out and "graphs compiled" in out and "specializations" in out


def test_status_without_daemon_fails_naming_socket(tmp_path, capsys):
    socket = str(tmp_path / "none.sock")
    assert cli.main(["--socket", socket, "status"]) == 1
    assert socket in capsys.readouterr().err
