"""Warm start: the time torch.compile spends inside Kiln's backend for a model
compiled before, by another process, on a daemon restarted since, against
the same compile done cold.

Each round:
  (a) cold: a fresh private daemon on an empty cache directory, then a fresh
      Python child that compiles the model and calls it once;
  (b) warm: that daemon stopped, a new one started on the same cache
      directory, then a new child doing the same.
Children time everything inside kiln.backend.compile_graph and the first
call's total, and split the backend's time into the client's steps (the
lowering cache, lowering, partitioning, serializing and hashing partitions,
uploading weights; the rest of a partition's construction is mostly the
daemon's Compile RPC). Both children first compile a one-op function with
backend="eager" and open their daemon session, so that Dynamo's start-up
and the session are not charged to the model; the one-time costs of a
process's first lowering (make_fx, decomposition tables) are, since every
new process pays them, and the lowering cache is what avoids them.

    .venv/bin/python bench/cache/warm_start.py [--model resnet50] [--rounds 3]

Prints the medians over rounds, the warm/cold ratio of the backend time and
of the daemon's own compile time (its log's "compiled graph ... in X ms"
lines: on a warm start, graphs from the cache directory, no pass run), and
the daemon's compile counters (disk hits) per phase.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "client"))

from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402

COMPILED = re.compile(r"compiled graph \S+ \(.*\) in ([0-9.]+) ms")

CHILD = r"""
import collections, json, sys, time, torch
sys.path.insert(0, sys.argv[2])
from models import build
torch.set_num_threads(int(sys.argv[3]))
import kiln.backend
from kiln import connection, lowering, lowering_cache, partition, serialize, subgraph

spent = collections.Counter()
def timed(owner, name, label):
    inner = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start
    setattr(owner, name, wrapper)

timed(kiln.backend, "compile_graph", "backend")
timed(lowering_cache, "for_graph", "cache key")
timed(lowering_cache.LoweringCache, "load", "cache load")
timed(lowering_cache.LoweringCache, "store", "cache store")
timed(lowering, "lower", "lower (make_fx)")
timed(partition, "partition", "partition")
timed(kiln.backend, "_copy_graph_module", "copy graph")
timed(subgraph.KilnSubgraph, "__init__", "partitions (KilnSubgraph)")
timed(serialize, "serialize", "  serialize")
timed(connection, "sha256_of", "  hash weights")
timed(connection.Connection, "ensure_constants", "  upload weights")

work = build(sys.argv[1], 1)
with torch.no_grad():
    # Dynamo's own start-up and the daemon session are not the model's; the
    # first lowering's one-time costs are (a new process pays them).
    torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(4))
    from kiln.options import KilnOptions
    opts = KilnOptions.from_mapping({})
    conn = connection.get_connection(opts.socket, opts.autostart, opts.cache_dir)
    conn.connect()
    conn.capabilities()
    spent.clear()
    kiln.backend.reset_stats()
    compiled = torch.compile(work.model, backend="kiln")
    start = time.perf_counter()
    out = compiled(*work.inputs)
    first_s = time.perf_counter() - start
    ref = work.model(*work.inputs)
stats = kiln.backend.stats()
err = float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
print(json.dumps({"first_s": first_s, "spent": dict(spent), "rel_err": err,
                  "hits": stats.lowering_cache_hits, "misses": stats.lowering_cache_misses,
                  "nodes_in_eager": stats.nodes_in_eager}))
"""


def run_child(model: str, threads: int, socket: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "client"), KILN_SOCKET=socket,
               KILN_AUTOSTART="0")
    env.pop("KILN_LOWERING_CACHE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(REPO / "bench" / "models"),
                          str(threads)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def one_phase(binary: str, threads: int, cache_dir: str, model: str) -> dict:
    """One daemon on cache_dir, one child; the child's times and the daemon's counters."""
    # The last --cache-dir wins: the daemon caches in the round's directory,
    # which outlives it (PrivateDaemon.stop removes only its own directory).
    d = PrivateDaemon(binary, threads, extra_args=["--cache-dir", cache_dir],
                      prefix="kiln-warm-")
    try:
        row = run_child(model, threads, d.socket)
        s = d.stats()
        row["daemon"] = {"graphs_compiled": s.graphs_compiled,
                         "disk_cache_hits": s.disk_cache_hits,
                         "memory_cache_hits": s.memory_cache_hits}
        row["daemon_compile_s"] = daemon_compile_seconds(d.log_path)
        return row
    finally:
        d.stop()


def daemon_compile_seconds(log_path: str) -> float:
    """The daemon's own time in its compiles (GraphCache's "compiled graph
    ... in X ms" lines, hits from the cache directory included)."""
    total_ms = 0.0
    with open(log_path, errors="replace") as f:
        for line in f:
            found = COMPILED.search(line)
            if found:
                total_ms += float(found.group(1))
    return total_ms / 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--json", action="store_true", help="also print every row")
    args = parser.parse_args()
    binary = find_kilnd()

    rows: dict[str, list[dict]] = {"cold": [], "warm": []}
    for r in range(args.rounds):
        cache_dir = tempfile.mkdtemp(prefix="kiln-warm-cache-", dir="/tmp")
        try:
            rows["cold"].append(one_phase(binary, args.threads, cache_dir, args.model))
            rows["warm"].append(one_phase(binary, args.threads, cache_dir, args.model))
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
        cold, warm = (rows[phase][-1]["spent"]["backend"] for phase in ("cold", "warm"))
        print(f"round {r + 1}/{args.rounds}: backend cold {cold:.3f} s, warm {warm:.3f} s",
              file=sys.stderr)

    def med(phase: str, get) -> float:
        return statistics.median(get(row) for row in rows[phase])

    labels = list(dict.fromkeys(k for phase in rows.values() for row in phase
                                for k in row["spent"]))
    print(f"{args.model} batch 1, median of {args.rounds} rounds, {args.threads} threads, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'':34}{'cold':>9}{'warm':>9}")
    print(f"{'first call (s)':34}{med('cold', lambda r: r['first_s']):9.3f}"
          f"{med('warm', lambda r: r['first_s']):9.3f}")
    for label in labels:
        print(f"{label + ' (s)':34}{med('cold', lambda r: r['spent'].get(label, 0.0)):9.3f}"
              f"{med('warm', lambda r: r['spent'].get(label, 0.0)):9.3f}")
    print(f"{'daemon compile (s)':34}{med('cold', lambda r: r['daemon_compile_s']):9.3f}"
          f"{med('warm', lambda r: r['daemon_compile_s']):9.3f}")
    ratio = statistics.median(w["spent"]["backend"] / c["spent"]["backend"]
                              for c, w in zip(rows["cold"], rows["warm"]))
    print(f"backend time warm/cold (median of per-round ratios): {ratio:.3f}")
    daemon_ratio = statistics.median(w["daemon_compile_s"] / c["daemon_compile_s"]
                                     for c, w in zip(rows["cold"], rows["warm"])
                                     if c["daemon_compile_s"] > 0)
    print(f"daemon compile warm/cold (median of per-round ratios): {daemon_ratio:.3f}")
    for phase in rows:
        counts = [(r["hits"], r["misses"]) for r in rows[phase]]
        daemon_rows = [r["daemon"] for r in rows[phase]]
        print(f"{phase}: lowering cache (hits, misses) per round {counts}; daemon "
              + ", ".join(f"{k} {[d[k] for d in daemon_rows]}" for k in daemon_rows[0])
              + f"; max relative error {max(r['rel_err'] for r in rows[phase]):.2e}")
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
