"""Fixtures for the end-to-end tests: one real kilnd per test session.

The daemon runs on a short socket path under /tmp with a temporary cache
dir; KILN_SOCKET, KILN_CACHE_DIR and KILN_DAEMON point the client at it, so
an auto-started replacement (after a test kills it) uses the same binary,
socket and cache. The helpers the tests share are in tests/testing/.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the shared helpers: tests/testing/

from testing.call_gate import CallGate  # noqa: E402
from testing.daemons import Kilnd, find_kilnd  # noqa: E402
from testing.shared_memory import assert_none_left_behind  # noqa: E402


@pytest.fixture(autouse=True)
def no_shared_memory_left_behind():
    """No test leaves an object of this process in /dev/shm (the last
    fixture of every test to finish)."""
    yield
    assert_none_left_behind()


@pytest.fixture(scope="session")
def kilnd():
    """The session's daemon; restartable after a test kills it, and with
    other flags (extra_args) after a test stops it."""
    binary = find_kilnd()
    workdir = tempfile.mkdtemp(prefix="kt-", dir="/tmp")
    d = Kilnd(workdir)
    saved = {k: os.environ.get(k) for k in ("KILN_SOCKET", "KILN_CACHE_DIR", "KILN_DAEMON",
                                             "KILN_AUTOSTART")}
    os.environ.update(KILN_SOCKET=d.socket, KILN_CACHE_DIR=d.cache_dir, KILN_DAEMON=binary)
    os.environ.pop("KILN_AUTOSTART", None)
    d.start()
    try:
        yield d
    finally:
        d.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def daemon_up(kilnd):
    """A serving daemon for this test, and a clean Dynamo cache."""
    kilnd.ensure_running()
    torch._dynamo.reset()
    from kiln import backend
    backend.reset_stats()
    yield kilnd
    torch._dynamo.reset()


@pytest.fixture
def gated_kilnd(kilnd):
    """A daemon of this test's own whose every run waits at a test gate
    (testing.call_gate): (daemon, gate). A daemon a client starts in its
    place, after the test killed it, has no gate."""
    workdir = tempfile.mkdtemp(prefix="kg-", dir="/tmp")
    gate = CallGate(workdir)
    d = Kilnd(workdir, gate.args)
    d.start()
    try:
        yield d, gate
    finally:
        gate.close()
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_without_channels(code: str) -> str:
    """Runs `code` in a fresh Python whose client makes every call over the
    Execute RPC (KILN_CALL_CHANNEL=0: the choice is made at start-up);
    asserts it exited 0 and returns its stdout."""
    env = dict(os.environ, KILN_CALL_CHANNEL="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout
