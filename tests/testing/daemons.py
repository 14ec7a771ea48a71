"""Starting, asking and stopping real kilnd processes in tests.

One class for every test that starts a daemon of its own (and for the
sessions' shared daemon), so that each waits for readiness, reports a
failed start with the daemon's log, and cleans up the same way.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Callable, Mapping, Sequence

import grpc
import pytest

from kiln import daemon
from kiln.v1 import kiln_pb2, kiln_pb2_grpc
from testing.processes import kill_and_wait, wait_for

REPO = Path(__file__).resolve().parents[2]


def find_kilnd() -> str:
    """$KILN_DAEMON, else the build's kilnd, else one on PATH; fails the test if none."""
    for candidate in (os.environ.get("KILN_DAEMON"),
                      str(REPO / "build" / "server" / "kilnd"),
                      shutil.which("kilnd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.fail("kilnd not found: build it (deploy/setup.sh) or set KILN_DAEMON")


def stats(socket_path: str, timeout_s: float = 10.0) -> kiln_pb2.StatsResponse:
    """GetStats of the daemon on socket_path, over a channel of its own."""
    channel = grpc.insecure_channel(daemon.target_for(socket_path))
    try:
        return kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(),
                                                         timeout=timeout_s)
    finally:
        channel.close()


class Kilnd:
    """One kilnd on a socket, cache directory and log file in `workdir`.

    args are its flags besides --socket (and --cache-dir, unless cache_dir
    is False); extra_args are added to them at the next start(). env,
    preexec_fn and pass_fds go to the process; with shell_prefix the daemon
    is exec'd by bash after that shell code (socket activation needs the
    shell's pid in LISTEN_PID).
    """

    def __init__(self, workdir: str | os.PathLike, args: Sequence[str] = (), *,
                 cache_dir: bool = True, env: Mapping[str, str] | None = None,
                 preexec_fn: Callable[[], None] | None = None, pass_fds: Sequence[int] = (),
                 shell_prefix: str | None = None):
        self.workdir = str(workdir)
        self.socket = os.path.join(self.workdir, "kilnd.sock")
        self.cache_dir = os.path.join(self.workdir, "cache")
        self.log_file = os.path.join(self.workdir, "kilnd.log")
        self.args = list(args)
        self.extra_args: list[str] = []
        self.with_cache_dir = cache_dir
        self.env = dict(os.environ, **(env or {})) if env is not None else None
        self.preexec_fn = preexec_fn
        self.pass_fds = tuple(pass_fds)
        self.shell_prefix = shell_prefix
        self.proc: subprocess.Popen | None = None

    @property
    def binary(self) -> str:
        return find_kilnd()

    def command(self) -> list[str]:
        cache = ["--cache-dir", self.cache_dir] if self.with_cache_dir else []
        return [self.binary, "--socket", self.socket, *cache, *self.args, *self.extra_args]

    def launch(self) -> None:
        """Starts the process without waiting for it to serve."""
        cmd = self.command()
        if self.shell_prefix is not None:
            cmd = ["/bin/bash", "-c",
                   self.shell_prefix + " exec " + " ".join(f"'{c}'" for c in cmd)]
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=self.env, preexec_fn=self.preexec_fn,
                                         pass_fds=self.pass_fds, start_new_session=True)

    def wait_ready(self, probe: Callable[[], bool] | None = None,
                   timeout_s: float = 60.0) -> None:
        """Waits until probe() (default: the unix socket answers) is true;
        fails the test, with the log, if the daemon exits first."""
        if probe is None:
            probe = lambda: daemon.probe(self.socket, 1.0)  # noqa: E731
        try:
            wait_for(lambda: self.proc.poll() is not None or probe(), timeout_s, "kilnd ready")
        except AssertionError:
            pytest.fail(f"kilnd not ready after {timeout_s} s; log:\n{self.log(30)}")
        if self.proc.poll() is not None:
            pytest.fail(f"kilnd {self.exit_description()}; log:\n{self.log(30)}")

    def start(self, timeout_s: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout_s=timeout_s)

    def ensure_running(self) -> None:
        """Starts it again unless a daemon (this one, or a replacement a
        client started) serves the socket."""
        if not daemon.probe(self.socket, 2.0):
            self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_description(self) -> str:
        code = self.proc.returncode if self.proc is not None else None
        if code is None:
            return "running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited with {code}"

    def pid(self) -> int | None:
        """Pid of whatever daemon serves the socket now (None: none answers)."""
        try:
            return self.stats(timeout_s=5).pid
        except grpc.RpcError:
            return None

    def stub(self) -> tuple[grpc.Channel, kiln_pb2_grpc.KilnStub]:
        channel = grpc.insecure_channel(daemon.target_for(self.socket))
        return channel, kiln_pb2_grpc.KilnStub(channel)

    def stats(self, timeout_s: float = 10.0) -> kiln_pb2.StatsResponse:
        return stats(self.socket, timeout_s)

    def stop(self) -> None:
        """SIGTERM (SIGKILL if that is not enough) to this daemon and to a
        replacement a client started on its socket."""
        pids = {self.proc.pid} if self.alive() else set()
        if daemon.probe(self.socket, 1.0):
            pids.add(self.pid())
        for pid in pids - {None}:
            if not kill_and_wait(pid, signal.SIGTERM, 20):
                kill_and_wait(pid, signal.SIGKILL, 20)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)

    def log(self, lines: int | None = None) -> str:
        """The log, or its last `lines` lines."""
        try:
            text = Path(self.log_file).read_text(errors="replace")
        except OSError:
            return ""
        return text if lines is None else "".join(text.splitlines(keepends=True)[-lines:])
