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


def _stub(socket_path: str) -> tuple[grpc.Channel, kiln_pb2_grpc.KilnStub]:
    # daemon.open_channel: a TCP daemon needs KILN_TOKEN (and KILN_TLS_CA).
    channel = daemon.open_channel(socket_path)
    return channel, kiln_pb2_grpc.KilnStub(channel)


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
        f"{s.memory_cache_hits} memory, {s.disk_cache_hits} disk; hit rate {hit_rate})",
        f"  dynamic shapes:  {s.dynamic_graphs} templates, {s.specializations} specializations",
        f"  executes:        {s.executes} ({s.execute_errors} errors)",
        f"  memory:          resident {mib(s.resident_bytes)}; uploaded constants "
        f"{s.constants} ({mib(s.constant_bytes)}); packed weights {mib(s.packed_weight_bytes)}; "
        f"plans of {s.live_graphs} live graphs {mib(s.plan_bytes)}",
        f"  constant bytes:  {mib(s.constant_bytes_uploaded)} uploaded, "
        f"{mib(s.constant_bytes_from_cache)} read from the cache dir",
        f"  clients:         {s.sessions} sessions, {s.live_handles} handles",
    ]
    for c in s.clients:
        lines.append(f"    pid {c.pid} ({c.client_name or 'unnamed'}, session {c.session_id}): "
                     f"{c.handles} handles, {c.channels} channels")
    return "\n".join(lines)


def _status(socket_path: str) -> int:
    channel, stub = _stub(socket_path)
    try:
        s = stub.GetStats(kiln_pb2.StatsRequest(), timeout=5.0)
    except grpc.RpcError as e:
        print(f"kilnd is not answering on {socket_path}: {e.code().name}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    print(format_stats(s, socket_path))
    return 0


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _unanswering_daemon(socket_path: str) -> int | None:
    """Pid of a kilnd holding socket_path's lock without answering on it
    (stopped, stuck), or None. The daemon writes its pid into the lock file
    and holds an exclusive flock on it while it lives."""
    if daemon.is_tcp(socket_path):
        return None
    try:
        with open(socket_path + ".lock") as f:
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
    channel, stub = _stub(socket_path)
    try:
        pid = stub.GetStats(kiln_pb2.StatsRequest(), timeout=5.0).pid
    except grpc.RpcError:
        pid = _unanswering_daemon(socket_path)
        if pid is None:
            print(f"kilnd is not running on {socket_path}")
            return 0
        print(f"kilnd (pid {pid}) holds {socket_path}.lock but does not answer; "
              "sending SIGTERM (and SIGCONT, in case it is stopped)")
    finally:
        channel.close()
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
