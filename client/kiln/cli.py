"""The `kiln` command: `kiln status` (daemon stats), `kiln stop`, `kiln start`,
and `kiln cache ...` (the on-disk cache, see cache_cli)."""
from __future__ import annotations

import argparse
import fcntl
import os
import signal
import sys
import time

import grpc

from kiln import cache_cli, daemon
from kiln.v1 import kiln_pb2, kiln_pb2_grpc


class _Daemon:
    """A channel to the daemon on socket_path. On a unix socket, through
    its checked directory, and only once the process listening there is
    known to run as this user (daemon.UntrustedSocketError otherwise)."""

    def __init__(self, socket_path: str):
        self.socket_dir = self.channel = self.stub = None
        if not daemon.is_tcp(socket_path):
            self.socket_dir = daemon.SocketDir.open_existing(socket_path)
            if self.socket_dir is None:
                return  # no directory, no daemon: nothing to connect to
            if self.socket_dir.has_socket():
                try:
                    self.socket_dir.server_credentials()
                except BaseException:
                    self.socket_dir.close()
                    raise
        # daemon.open_channel: a TCP daemon needs KILN_TOKEN (and KILN_TLS_CA).
        self.channel = daemon.open_channel(socket_path, socket_dir=self.socket_dir)
        self.stub = kiln_pb2_grpc.KilnStub(self.channel)

    def stats(self) -> kiln_pb2.StatsResponse:
        """GetStats; grpc.RpcError (UNAVAILABLE without a socket directory)."""
        if self.stub is None:
            raise _NotThere()
        return self.stub.GetStats(kiln_pb2.StatsRequest(), timeout=5.0)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.socket_dir is not None:
            self.socket_dir.close()


class _NotThere(grpc.RpcError):
    """What a call gets when the socket's directory does not exist."""

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


def format_stats(s: kiln_pb2.StatsResponse, socket_path: str) -> str:
    def mib(n: int) -> str:
        return f"{n / (1 << 20):.1f} MiB"

    requests = s.cache_hits + s.graphs_compiled
    hit_rate = f"{100.0 * s.cache_hits / requests:.0f}%" if requests else "n/a"
    lines = [
        f"kilnd {s.runtime_version} (pid {s.pid}) on {socket_path}, up {s.uptime_s:.0f} s",
        f"  cache dir:       {s.cache_dir or '(off)'}"
        + (f" ({mib(s.cache_bytes)} of "
           f"{mib(s.cache_max_bytes) if s.cache_max_bytes else 'no'} cap)" if s.cache_dir else ""),
        f"  graphs compiled: {s.graphs_compiled} (cache misses; cache hits {s.cache_hits}: "
        f"{s.memory_cache_hits} memory, {s.disk_cache_hits} disk, {s.remote_cache_hits} remote; "
        f"hit rate {hit_rate}); {s.compile_seconds:.2f} s answering compiles",
        f"  dynamic shapes:  {s.dynamic_graphs} templates, {s.specializations} specializations",
        f"  executes:        {s.executes} ({s.execute_errors} errors); inputs "
        f"{mib(s.input_bytes - s.input_bytes_in_place)} copied, "
        f"{mib(s.input_bytes_in_place)} read in place",
        f"  memory:          resident {mib(s.resident_bytes)}; uploaded constants "
        f"{s.constants} ({mib(s.constant_bytes)}); packed weights {mib(s.packed_weight_bytes)}; "
        f"plans of {s.live_graphs} live graphs {mib(s.plan_bytes)}",
        f"  constant bytes:  {mib(s.constant_bytes_uploaded)} uploaded, "
        f"{mib(s.constant_bytes_from_cache)} read from the cache dir",
        f"  clients:         {s.sessions} sessions, {s.live_handles} handles",
    ]
    if s.remote_cache:
        lines.insert(3, f"  remote cache:    {s.remote_cache}: {s.remote_hits} hits, "
                        f"{s.remote_misses} misses, {s.remote_refused} refused, "
                        f"{s.remote_errors} errors; {mib(s.remote_bytes_read)} read, "
                        f"{mib(s.remote_bytes_written)} written; waited for the fleet "
                        f"{s.fleet_waits} times")
    for c in s.clients:
        lines.append(f"    pid {c.pid} ({c.client_name or 'unnamed'}, session {c.session_id}): "
                     f"{c.handles} handles, {c.channels} channels")
    return "\n".join(lines)


def _status(socket_path: str) -> int:
    try:
        d = _Daemon(socket_path)
    except daemon.UntrustedSocketError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        s = d.stats()
    except grpc.RpcError as e:
        print(f"kilnd is not answering on {socket_path}: {e.code().name}", file=sys.stderr)
        return 1
    finally:
        d.close()
    print(format_stats(s, socket_path))
    return 0


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _unanswering_daemon(socket_path: str, socket_dir: daemon.SocketDir | None) -> int | None:
    """Pid of a kilnd holding socket_path's lock without answering on it
    (stopped, stuck), or None. The daemon writes its pid into the lock file
    and holds an exclusive flock on it while it lives. The lock is read
    through the socket's checked directory, never through a link."""
    if daemon.is_tcp(socket_path) or socket_dir is None:
        return None
    try:
        lock = socket_dir.open_file(os.path.basename(socket_path) + ".lock", os.O_RDONLY)
        with os.fdopen(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
                return None  # nobody holds it
            except BlockingIOError:
                pid = int(f.read().strip() or 0)
        with open(f"/proc/{pid}/comm") as f:
            return pid if pid > 0 and f.read().strip() == "kilnd" else None
    except (OSError, ValueError):
        return None


def _stop(socket_path: str) -> int:
    try:
        d = _Daemon(socket_path)
    except daemon.UntrustedSocketError as e:
        print(e, file=sys.stderr)
        return 1
    try:
        pid = d.stats().pid
    except grpc.RpcError:
        pid = _unanswering_daemon(socket_path, d.socket_dir)
        if pid is None:
            print(f"kilnd is not running on {socket_path}")
            return 0
        print(f"kilnd (pid {pid}) holds {socket_path}.lock but does not answer; "
              "sending SIGTERM (and SIGCONT, in case it is stopped)")
    finally:
        d.close()
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.1)
    if os.path.exists(f"/proc/{pid}") and not _zombie(pid):
        print(f"kilnd (pid {pid}) did not stop within 10 s; `kill -9 {pid}` ends it "
              "(calls in flight fail)", file=sys.stderr)
        return 1
    print(f"stopped kilnd (pid {pid}) on {socket_path}")
    return 0


def _start(socket_path: str) -> int:
    try:
        daemon.ensure_daemon(socket_path, autostart=True)
    except (daemon.DaemonError, OSError) as e:  # OSError: KILN_DAEMON names no program
        print(e, file=sys.stderr)
        return 1
    print(f"kilnd is serving on {socket_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kiln",
                                     description="Control the kilnd daemon and its cache.")
    parser.add_argument("--socket", default=None,
                        help="daemon socket (default: $KILN_SOCKET or the per-user default)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="print the daemon's stats")
    sub.add_parser("start", help="start the daemon if it is not running")
    sub.add_parser("stop", help="stop the daemon (SIGTERM)")
    cache_cli.add_parser(sub)
    ns = parser.parse_args(argv)
    if ns.command == "cache":
        return cache_cli.run(ns)
    socket_path = ns.socket or daemon.default_socket_path()
    return {"status": _status, "start": _start, "stop": _stop}[ns.command](socket_path)


if __name__ == "__main__":
    sys.exit(main())
