"""Fixtures for the end-to-end tests: one real kilnd per test session.

The daemon runs on a short socket path under /tmp with a temporary cache
dir; KILN_SOCKET, KILN_CACHE_DIR and KILN_DAEMON point the client at it, so
an auto-started replacement (after a test kills it) uses the same binary,
socket and cache.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import grpc
import pytest
import torch

from kiln import daemon
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

REPO = Path(__file__).resolve().parents[2]


def find_kilnd() -> str | None:
    for candidate in (os.environ.get("KILN_DAEMON"),
                      str(REPO / "build" / "server" / "kilnd"),
                      shutil.which("kilnd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _alive(pid: int) -> bool:
    """True while pid runs (reaping it if it is our zombie child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_and_wait(pid: int, sig: int = signal.SIGKILL, timeout_s: float = 10.0) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def stop_process(pid: int, timeout_s: float = 30.0) -> None:
    """SIGSTOPs pid and returns once every one of its threads has stopped.

    kill() only queues the stop: each thread stops when it next enters the
    kernel, and until the last one has, a thread that was running (a
    daemon's channel thread spinning for the next call) can still serve a
    request. The threads' states in /proc say when none can any more."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            return True
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    state = f.read().rsplit(")", 1)[-1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state not in ("T", "t"):
                return False
        return True

    wait_for(stopped, timeout_s, f"every thread of pid {pid} to stop")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition") -> None:
    """Polls predicate() until it is true; AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Kilnd:
    """The test session's daemon; restartable after a test kills it."""

    def __init__(self, binary: str, workdir: str):
        self.binary = binary
        self.socket = os.path.join(workdir, "kilnd.sock")
        self.cache_dir = os.path.join(workdir, "cache")
        self.log_file = os.path.join(workdir, "kilnd.log")
        self.proc: subprocess.Popen | None = None
        self.extra_args: list[str] = []  # flags for the next start()

    def start(self) -> None:
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, "--socket", self.socket, "--cache-dir", self.cache_dir,
                 *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 30
        while not daemon.probe(self.socket, 1.0):
            if self.proc.poll() is not None:
                pytest.fail(f"kilnd exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"kilnd not ready after 30 s; log:\n{self.log_tail()}")
            time.sleep(0.05)

    def pid(self) -> int | None:
        """Pid of whatever daemon serves the socket now."""
        channel = grpc.insecure_channel(daemon.target_for(self.socket))
        try:
            return kiln_pb2_grpc.KilnStub(channel).GetStats(
                kiln_pb2.StatsRequest(), timeout=5).pid
        except grpc.RpcError:
            return None
        finally:
            channel.close()

    def ensure_running(self) -> None:
        if not daemon.probe(self.socket, 2.0):
            self.start()

    def stop(self) -> None:
        pid = self.pid()
        for p in {pid, self.proc.pid if self.proc else None} - {None}:
            if not kill_and_wait(p, signal.SIGTERM, 10):
                kill_and_wait(p, signal.SIGKILL, 10)
        if self.proc is not None:
            self.proc.poll()

    def log_tail(self, n: int = 30) -> str:
        try:
            return "".join(open(self.log_file, errors="replace").readlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="session")
def kilnd():
    binary = find_kilnd()
    if binary is None:
        pytest.fail("kilnd not found: build it (deploy/setup.sh) or set KILN_DAEMON")
    workdir = tempfile.mkdtemp(prefix="kt-", dir="/tmp")
    d = Kilnd(binary, workdir)
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
