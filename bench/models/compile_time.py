"""Cold compile time of one model under backend="kiln", split into the part
every torch.compile backend pays (Dynamo's bytecode tracing and guards) and
the part that is Kiln's (lowering to ATen, partitioning, hashing and
uploading weights, the daemon's compile, the first execute).

Each measurement runs in a fresh child process against a fresh private
daemon started with --no-cache, so nothing is warm: no compiled graph, no
uploaded weight. Two kinds of child, interleaved round by round so machine
noise hits both alike:

  - dynamo: torch.compile(model, backend="eager"), Dynamo with a backend
    that does nothing, first call;
  - kiln: torch.compile(model, backend="kiln"), first call; also the time
    spent inside Kiln's backend (the graph compile, including the daemon's
    compile and the weight upload), and the daemon's own compile time.

Both children first compile a one-op function with their backend, so the
one-time costs of importing and initialising Dynamo (and of opening a
session to the daemon) are not charged to the model.

    .venv/bin/python bench/models/compile_time.py [--model resnet50] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client"))

from kiln import daemon  # noqa: E402

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[3])
from models import build
mode, name = sys.argv[1], sys.argv[2]
torch.set_num_threads(int(sys.argv[4]))
work = build(name, 1)
backend_s = 0.0
if mode == "kiln":
    import kiln.backend
    inner = kiln.backend.compile_graph
    def timed(*args, **kwargs):
        global backend_s
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            backend_s += time.perf_counter() - start
    kiln.backend.compile_graph = timed
backend = "kiln" if mode == "kiln" else "eager"
with torch.no_grad():
    warm = torch.compile(lambda x: x * 2 + 1, backend=backend)
    warm(torch.ones(4))
    backend_s = 0.0
    work.model(*work.inputs)
    eager_s = time.perf_counter()
    work.model(*work.inputs)
    eager_s = time.perf_counter() - eager_s
    compiled = torch.compile(work.model, backend=backend)
    start = time.perf_counter()
    out = compiled(*work.inputs)
    first_s = time.perf_counter() - start
print(json.dumps({"first_s": first_s, "backend_s": backend_s, "eager_call_s": eager_s}))
"""


def start_daemon(directory: str, threads: int) -> tuple[subprocess.Popen, str]:
    sock = os.path.join(directory, "kilnd.sock")
    log = open(os.path.join(directory, "kilnd.log"), "ab")
    proc = subprocess.Popen(
        [daemon.find_daemon_binary(), "--socket", sock, "--threads", str(threads),
         "--no-cache", "--log-level", "info"],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not daemon.probe(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"kilnd did not start (exit {proc.poll()})")
        time.sleep(0.05)
    return proc, sock


def daemon_compile_ms(log_path: str) -> float:
    """Sum of the daemon's compile times in its log (one line per compile)."""
    total = 0.0
    with open(log_path, errors="replace") as f:
        for line in f:
            if "compiled" in line and " ms" in line:
                for word, nxt in zip(line.split(), line.split()[1:]):
                    if nxt.startswith("ms"):
                        try:
                            total += float(word)
                        except ValueError:
                            pass
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()

    env = dict(os.environ, PYTHONPATH=str(REPO / "client"), KILN_AUTOSTART="0")
    rows: dict[str, list[dict]] = {"dynamo": [], "kiln": []}
    for r in range(args.rounds):
        for mode in rows:
            directory = tempfile.mkdtemp(prefix="kiln-compile-time-")
            proc = None
            try:
                # A cache directory of its own: the client's lowering cache
                # (client/kiln/lowering_cache.py) lives there too, and one
                # left warm by earlier runs would skip the lowering.
                child_env = dict(env, KILN_CACHE_DIR=directory)
                if mode == "kiln":
                    proc, sock = start_daemon(directory, args.threads)
                    child_env["KILN_SOCKET"] = sock
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, args.model,
                     str(REPO / "bench" / "models"), str(args.threads)],
                    env=child_env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(out.stderr[-3000:], file=sys.stderr)
                    return 1
                row = json.loads(out.stdout.strip().splitlines()[-1])
                if proc is not None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(timeout=30)
                    proc = None
                    row["daemon_compile_s"] = daemon_compile_ms(
                        os.path.join(directory, "kilnd.log")) / 1e3
                rows[mode].append(row)
            finally:
                if proc is not None:
                    proc.kill()
                shutil.rmtree(directory, ignore_errors=True)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def med(mode: str, key: str) -> float:
        return statistics.median(row[key] for row in rows[mode])

    dynamo, kiln = med("dynamo", "first_s"), med("kiln", "first_s")
    print(f"{args.model} batch 1, cold (fresh process, fresh daemon, no cache), "
          f"median of {args.rounds} rounds, {args.threads} threads; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"  first call, Dynamo with backend='eager':  {dynamo:6.2f} s")
    print(f"  first call, backend='kiln':               {kiln:6.2f} s")
    print(f"  Kiln's share (difference):                {kiln - dynamo:6.2f} s")
    print(f"    inside Kiln's backend (lower, partition, upload, daemon compile): "
          f"{med('kiln', 'backend_s'):.2f} s")
    print(f"    of which the daemon's compile: {med('kiln', 'daemon_compile_s'):.2f} s")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
