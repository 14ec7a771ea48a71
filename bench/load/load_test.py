"""Load test: many client processes on one daemon, executes with compiles
and releases interleaved.

Each of --clients processes compiles a small MLP with backend="kiln" and
runs --calls executes, checking every 50th result against eager; every
--recompile-every calls it also compiles a model of another width (a new
graph, new weights) and drops it again (handles released, weights left to
the daemon's grace period). The daemon's resident memory is taken after a
warm-up client has come and gone (baseline) and again after every load
client has left and the daemon has dropped what they held.

    .venv/bin/python bench/load/load_test.py [--clients 16 --calls 1000]

Prints per-call latency percentiles over all clients, errors, and the
daemon's RSS before and after; writes them as JSON with --out.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from private_daemon import PrivateDaemon, find_kilnd, resident_bytes  # noqa: E402

WORKER = r"""
import gc, json, sys, time
import torch, torch.nn as nn
torch.set_num_threads(1)
socket, calls, recompile_every, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
options = {"socket": socket, "autostart": False, "fallback": "error"}
torch.manual_seed(seed)

def mlp(width):
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, 10)).eval()

model = mlp(128)
compiled = torch.compile(model, backend="kiln", options=options)
x = torch.randn(4, 64)
latencies, errors, checks = [], [], 0
with torch.no_grad():
    compiled(x)
    for i in range(calls):
        t0 = time.perf_counter()
        try:
            y = compiled(x)
        except Exception as e:
            errors.append(repr(e)[:300])
            continue
        latencies.append(time.perf_counter() - t0)
        if i % 50 == 0:
            checks += 1
            if not torch.allclose(y, model(x), rtol=1e-4, atol=1e-5):
                errors.append(f"call {i}: wrong result")
        if recompile_every and i % recompile_every == recompile_every - 1:
            # A graph this client compiles, uses and drops again.
            other = mlp(96 + (i // recompile_every) % 4 * 16)
            other_c = torch.compile(other, backend="kiln", options=options)
            try:
                if not torch.allclose(other_c(x), other(x), rtol=1e-4, atol=1e-5):
                    errors.append(f"recompile at {i}: wrong result")
            except Exception as e:
                errors.append(repr(e)[:300])
            del other, other_c
            gc.collect()
print(json.dumps({"latencies": latencies, "errors": errors, "checks": checks}))
"""


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[k]


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--recompile-every", type=int, default=250)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    grace_s = 2
    d = PrivateDaemon(find_kilnd(), extra_args=["--no-cache", "--constant-grace-s", str(grace_s)],
                      prefix="kiln-load-")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "client"))
    python = sys.executable

    def run_clients(n: int, calls: int, recompile_every: int) -> list[subprocess.Popen]:
        return [subprocess.Popen([python, "-c", WORKER, d.socket, str(calls),
                                  str(recompile_every), str(i)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for i in range(n)]

    def settled() -> bool:
        s = d.stats()
        return s.sessions == 0 and s.constants == 0

    try:
        # Warm-up: one client does what the load clients will do, so the
        # baseline holds what the first use initializes for good.
        for p in run_clients(1, 50, 25):
            p.communicate()
        wait_until(settled, 60)
        time.sleep(grace_s)
        baseline = resident_bytes(d.proc.pid)
        print(f"daemon RSS baseline: {baseline / 2**20:.1f} MiB (after a warm-up client)")

        t0 = time.monotonic()
        procs = run_clients(args.clients, args.calls, args.recompile_every)
        peak, latencies, errors, checks, crashed = baseline, [], [], 0, 0
        while any(p.poll() is None for p in procs):
            peak = max(peak, resident_bytes(d.proc.pid))
            time.sleep(0.2)
        for p in procs:
            out, err = p.communicate()
            if p.returncode != 0 or not out.strip():
                crashed += 1
                errors.append(f"client exited {p.returncode}: {err[-500:]}")
                continue
            r = json.loads(out.strip().splitlines()[-1])
            latencies += r["latencies"]
            errors += r["errors"]
            checks += r["checks"]
        wall = time.monotonic() - t0
        stats = d.stats()
        ok = wait_until(settled, 120)
        time.sleep(grace_s + 2)
        after = resident_bytes(d.proc.pid)
        latencies.sort()
        result = {
            "clients": args.clients, "calls_per_client": args.calls,
            "recompile_every": args.recompile_every, "executes": len(latencies),
            "errors": len(errors), "first_errors": errors[:5], "result_checks": checks,
            "p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
            "max_ms": latencies[-1] * 1e3 if latencies else float("nan"),
            "wall_s": wall, "graphs_compiled": stats.graphs_compiled,
            "rss_baseline_mib": baseline / 2**20, "rss_peak_mib": peak / 2**20,
            "rss_after_mib": after / 2**20, "released": ok,
        }
    finally:
        d.stop()
    print(f"{args.clients} clients x {args.calls} executes (a compile + release every "
          f"{args.recompile_every}): {result['executes']} executes in {wall:.1f} s, "
          f"{result['errors']} errors, {checks} results checked against eager")
    print(f"latency per call: p50 {result['p50_ms']:.3f} ms, p99 {result['p99_ms']:.3f} ms, "
          f"max {result['max_ms']:.1f} ms")
    print(f"daemon RSS: baseline {result['rss_baseline_mib']:.1f} MiB, peak "
          f"{result['rss_peak_mib']:.1f} MiB, after the clients left "
          f"{result['rss_after_mib']:.1f} MiB ({result['rss_after_mib'] / result['rss_baseline_mib']:.2f}x)"
          f"; sessions and constants released: {ok}")
    for e in errors[:5]:
        print("error:", e)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0 if not errors and ok else 1


if __name__ == "__main__":
    sys.exit(main())
