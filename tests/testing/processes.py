"""Waiting for processes and conditions without racing them.

Every wait here is on a condition that is bound to become true (a process
exits, a thread stops, a daemon answers); the deadline only turns a bug
into a failure instead of a hang, so it is generous.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from typing import Callable


def wait_for(predicate: Callable[[], object], timeout_s: float = 30.0,
             what: str = "condition") -> None:
    """Polls predicate() until it is true; AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
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
    """Sends sig and waits for pid to be gone; False if it outlived timeout_s."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return False


def stop_process(pid: int, timeout_s: float = 30.0) -> None:
    """SIGSTOPs pid and returns once every one of its threads has stopped.

    For tests of a daemon that does not answer, never to hold a call back
    (testing.call_gate does that). kill() only queues the stop: each thread
    stops when it next enters the kernel, and until the last one has, a
    thread that was running can still serve a request. The threads' states
    in /proc say when none can any more."""
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


def can_unshare_pid() -> bool:
    """Whether this host lets us start a process in a pid namespace of its own."""
    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True,
                          timeout=30).returncode == 0
