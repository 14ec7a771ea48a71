"""A real redis-server (Debian's package) for tests, on loopback, and a
minimal RESP client to look at and tamper with what daemons stored there.

The client speaks just enough of the protocol for the tests' own checks
(GET, SET, KEYS, DEL, STRLEN, PING); daemons use hiredis.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from testing.processes import kill_and_wait, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on 127.0.0.1 with nothing persisted, in `workdir`."""

    def __init__(self, workdir: str | os.PathLike):
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server not found: deploy/setup.sh installs it (deploy/apt-packages.txt)")
        self.binary = binary
        self.workdir = str(workdir)
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, extra: tuple[str, ...] = ()) -> None:
        # A port another process takes between the probe and the bind makes
        # redis-server exit: try another.
        for _ in range(5):
            self.port = _free_port()
            log = open(os.path.join(self.workdir, "redis.log"), "ab")
            self.proc = subprocess.Popen(
                [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
                 "--appendonly", "no", "--dir", self.workdir, *extra],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
            log.close()
            try:
                wait_for(lambda: self.proc.poll() is not None or self._answers(), 20,
                         "redis-server ready")
            except AssertionError:
                pass
            if self.proc.poll() is None and self._answers():
                return
            self.stop()
        pytest.fail(f"redis-server did not start; log:\n{self.log()}")

    def _answers(self) -> bool:
        try:
            return self.command("PING") == "PONG"
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if not kill_and_wait(self.proc.pid, 15, 20):
                kill_and_wait(self.proc.pid, 9, 20)
        if self.proc is not None:
            self.proc.wait(timeout=20)

    def log(self) -> str:
        try:
            return Path(self.workdir, "redis.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def command(self, *args: str | bytes):
        """One command; its reply (bytes for bulk strings, str for status,
        int, list, or None)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
            parts = [a.encode() if isinstance(a, str) else a for a in args]
            s.sendall(b"*%d\r\n" % len(parts) +
                      b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
            reader = s.makefile("rb")
            return _read_reply(reader)

    def keys(self, pattern: str) -> list[bytes]:
        return self.command("KEYS", pattern)


def _read_reply(reader):
    line = reader.readline()
    if not line:
        raise OSError("connection closed")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = reader.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(reader) for _ in range(n)]
    raise OSError(f"unexpected reply {line!r}")


def write_key_file(path: str | os.PathLike) -> str:
    """A fleet key (64 hex digits and a newline), mode 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    return str(path)

