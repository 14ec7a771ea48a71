"""The client package's unit tests: no daemon, no socket, no gRPC call.

Each test module is named for the client module it covers
(client/kiln/partition.py -> test_partition.py). Every test here runs with
auto-start off and the socket pointed at a path where nothing listens, so
a test that reached for the daemon by mistake fails instead of starting
one. The graphs they use are in unit_graphs.py.
"""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_daemon(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_AUTOSTART", "0")
    monkeypatch.setenv("KILN_SOCKET", str(tmp_path / "nothing-listens.sock"))
