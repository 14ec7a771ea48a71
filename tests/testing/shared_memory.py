"""Checking that a test left nothing of its process in /dev/shm.

Kiln's client unlinks every object it creates as soon as the daemon has
mapped it; a name still in /dev/shm after a test is memory nobody frees
until the host reboots.
"""
from __future__ import annotations

import os
from pathlib import Path


def assert_none_left_behind(pid: int | None = None) -> None:
    """Removes every "kiln-<pid>-*" object in /dev/shm (this process's by
    default), then fails naming them if there were any."""
    pid = os.getpid() if pid is None else pid
    left = sorted(p.name for p in Path("/dev/shm").glob(f"kiln-{pid}-*"))
    for name in left:
        try:
            os.unlink(f"/dev/shm/{name}")
        except FileNotFoundError:
            pass
    assert not left, f"objects left in /dev/shm: {left}"
