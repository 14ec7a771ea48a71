"""A kilnd of a benchmark's own: private socket and cache directory.

Benchmarks start their own daemon so that what they measure (compiles,
memory, throughput) is not mixed with whatever else uses the per-user one.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client"))

from kiln import daemon  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def find_kilnd() -> str:
    for candidate in (os.environ.get("KILN_DAEMON"), str(REPO / "build" / "server" / "kilnd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    sys.exit("kilnd not found: build it (see README) or set KILN_DAEMON")


def _status_bytes(pid: int, key: str) -> int:
    """A size field of /proc/PID/status (reported in KiB), in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def resident_bytes(pid: int) -> int:
    """VmRSS of a process, in bytes."""
    return _status_bytes(pid, "VmRSS")


def peak_resident_bytes(pid: int) -> int:
    """VmHWM of a process (its peak resident memory so far), in bytes."""
    return _status_bytes(pid, "VmHWM")


def resident_split(pid: int) -> dict[str, int]:
    """VmRSS split into anonymous, file-backed and shared-memory pages (bytes)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("RssAnon", "RssFile", "RssShmem"):
                out[key] = int(line.split()[1]) * 1024
    return out


class PrivateDaemon:
    """A kilnd of our own on a private socket and cache directory."""

    def __init__(self, binary: str, threads: int = 0, extra_args: list[str] | None = None,
                 prefix: str = "kiln-bench-"):
        self.dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.socket = os.path.join(self.dir, "kilnd.sock")
        self.cache_dir = os.path.join(self.dir, "cache")
        self.log_path = os.path.join(self.dir, "kilnd.log")
        cmd = [binary, "--socket", self.socket, "--cache-dir", self.cache_dir]
        if threads:
            cmd += ["--threads", str(threads)]
        cmd += extra_args or []
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True)
        deadline = time.monotonic() + 30
        while not daemon.probe(self.socket, 1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kilnd did not start; log:\n{self.log_tail()}")
            time.sleep(0.05)

    def stats(self):
        import grpc
        from kiln.v1 import kiln_pb2, kiln_pb2_grpc
        with grpc.insecure_channel(daemon.target_for(self.socket)) as channel:
            return kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=10)

    def cpu_seconds(self) -> float:
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime

    def log_tail(self, n: int = 20) -> str:
        try:
            return "".join(open(self.log_path, errors="replace").readlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
