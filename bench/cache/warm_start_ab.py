"""Warm start, two kilnd builds against each other: each round, for each
build in turn, a fresh cache directory, a cold compile then a warm one
(after a daemon restart) of the model, by warm_start.py's child process.
Alternating the builds round by round keeps the machine's load from
favouring either. Prints each round and the medians of the backend's warm
time and of the daemon's own warm compile (its log's "[disk cache hit]"
line).

    .venv/bin/python bench/cache/warm_start_ab.py OLD_KILND NEW_KILND [--rounds 6]
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "cache"))
sys.path.insert(0, str(REPO / "client"))

import warm_start  # noqa: E402
from private_daemon import PrivateDaemon  # noqa: E402


def warm_once(binary: str, model: str, threads: int) -> tuple[float, float]:
    """(backend seconds, daemon compile ms) of a warm compile after a cold one."""
    cache_dir = tempfile.mkdtemp(prefix="kiln-ab-", dir="/tmp")
    try:
        for _ in ("cold", "warm"):
            d = PrivateDaemon(binary, threads, extra_args=["--cache-dir", cache_dir],
                              prefix="kiln-ab-d-")
            try:
                row = warm_start.run_child(model, threads, d.socket)
                log = Path(d.log_path).read_text(errors="replace")
            finally:
                d.stop()
        hit = re.search(r"in ([\d.]+) ms \[disk cache hit\]", log)
        if hit is None:
            sys.exit(f"{binary}: no disk cache hit in the warm run")
        return row["spent"]["backend"], float(hit.group(1))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    builds = {"old": args.old, "new": args.new}
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in builds}
    for r in range(args.rounds):
        for name, binary in builds.items():
            rows[name].append(warm_once(binary, args.model, args.threads))
        print(f"round {r + 1}: " + ", ".join(
            f"{k} backend {v[-1][0]:.3f} s, daemon {v[-1][1]:.1f} ms" for k, v in rows.items()),
            flush=True)
    for name, got in rows.items():
        print(f"{name}: warm backend median {statistics.median(b for b, _ in got):.3f} s, "
              f"daemon warm compile median {statistics.median(d for _, d in got):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
