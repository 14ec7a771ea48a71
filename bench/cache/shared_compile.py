"""Four processes compiling one model at once against one kilnd.

What a TorchServe deployment with four workers does: every worker builds
the same model and calls torch.compile(backend="kiln") at the same moment.
The daemon should compile once (single flight) and hold one copy of the
weights, where four eager (or Inductor) workers hold four.

Starts a private daemon (fresh socket and cache directory: a cold compile),
releases N client processes together, and reports

  - compiles in the daemon's stats (target: 1) and each client's time to
    its first result,
  - the daemon's resident memory before and after, against the model's
    weight bytes (target: growth <= 1.3x the weights), with the constants,
    packed weights the daemon reports, and its peak during the compile,
  - the same N processes running the model in eager PyTorch: the weight
    copies they hold between them (N x the weights).

    .venv/bin/python bench/cache/shared_compile.py                # resnet50, 4 processes
    .venv/bin/python bench/cache/shared_compile.py --model resnet18 --procs 2
    .venv/bin/python bench/cache/shared_compile.py --warm-up resnet18  # a daemon that served before
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "client"))

from private_daemon import (PrivateDaemon, find_kilnd, peak_resident_bytes,  # noqa: E402
                            resident_bytes, resident_split)

MiB = 1 << 20


def build(name: str):
    import torch
    import torchvision
    torch.manual_seed(0)  # every process builds the same weights
    model = getattr(torchvision.models, name)(weights=None).eval()
    return model, torch.randn(1, 3, 224, 224)


def worker(socket_path: str | None, name: str, start, conn) -> None:
    """Builds the model, waits for the others, runs it once (compiled with
    kiln when socket_path is given, else eager) and reports."""
    import torch
    torch.set_num_threads(1)
    if socket_path:
        os.environ["KILN_SOCKET"] = socket_path
        os.environ["KILN_AUTOSTART"] = "0"
    model, x = build(name)
    fn = torch.compile(model, backend="kiln") if socket_path else model
    start.wait()
    t0 = time.perf_counter()
    with torch.no_grad():
        y = fn(x)
    first_s = time.perf_counter() - t0
    with torch.no_grad():
        ok = torch.allclose(y, model(x), rtol=1e-3, atol=1e-3 * float(y.abs().max()))
    conn.send({"first_s": first_s, "rss": resident_bytes(os.getpid()), "ok": bool(ok)})
    conn.recv()  # stay alive (holding the model) until the parent has measured


def run_group(n: int, socket_path: str | None, name: str, measure=None) -> tuple[list[dict], object]:
    """Runs n workers at once; returns their reports and what `measure()`
    returned while they were all still alive (holding their models)."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(n)
    pipes, procs = [], []
    for _ in range(n):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=worker, args=(socket_path, name, start, child))
        p.start()
        pipes.append(parent)
        procs.append(p)
    results = [pipe.recv() for pipe in pipes]
    measured = measure() if measure else None
    for pipe in pipes:
        pipe.send("done")
    for p in procs:
        p.join(60)
    return results, measured


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--grace", type=int, default=2,
                    help="the daemon's --constant-grace-s: how long it keeps uploaded "
                         "weights no compiled graph holds (default here 2 s; kilnd's own "
                         "default is 60)")
    ap.add_argument("--warm-up", metavar="MODEL",
                    help="first compile and run MODEL (another model) in one client that "
                         "then exits, and count the growth from there: what the model costs "
                         "a daemon that has served before (its libraries' code already paged "
                         "in), rather than a fresh one")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    model, _ = build(args.model)
    weight_bytes = sum(t.numel() * t.element_size()
                       for t in list(model.parameters()) + list(model.buffers()))
    del model

    kilnd = PrivateDaemon(find_kilnd(), prefix="kiln-shared-",
                          extra_args=["--constant-grace-s", str(args.grace)])

    def measure():
        """Right after the compile, and once the grace period has passed
        (the uploaded originals of packed weights gone)."""
        now = (kilnd.stats(), resident_bytes(kilnd.proc.pid))
        peak.append(peak_resident_bytes(kilnd.proc.pid))
        time.sleep(args.grace + 2.5)
        split.update(resident_split(kilnd.proc.pid))
        return now, (kilnd.stats(), resident_bytes(kilnd.proc.pid))

    split: dict[str, int] = {}
    peak: list[int] = []  # the daemon's VmHWM right after the compile

    try:
        if args.warm_up:
            run_group(1, kilnd.socket, args.warm_up)
            # Its session closes (about 1 s), its graph goes, then its weights.
            time.sleep(args.grace + 2.5)
            warm = kilnd.stats()
            print(f"warm-up with {args.warm_up}: daemon resident {resident_bytes(kilnd.proc.pid) / MiB:.0f} "
                  f"MiB, {warm.live_graphs} live graphs, {warm.constant_bytes / MiB:.0f} MiB constants")
        before = kilnd.stats()
        rss0 = resident_bytes(kilnd.proc.pid)
        split0 = resident_split(kilnd.proc.pid)
        clients, ((early, rss_early), (after, rss1)) = run_group(
            args.procs, kilnd.socket, args.model, measure)
    finally:
        kilnd.stop()
    eager, _ = run_group(args.procs, None, args.model)

    compiles = after.graphs_compiled - before.graphs_compiled
    growth = rss1 - rss0
    out = {
        "model": args.model, "procs": args.procs, "weight_bytes": weight_bytes,
        "warm_up": args.warm_up, "daemon_compiles": compiles,
        "daemon_cache_hits": after.cache_hits - before.cache_hits,
        "daemon_rss_before": rss0, "daemon_rss_after_compile": rss_early,
        "daemon_rss_after_grace": rss1, "grace_s": args.grace,
        "daemon_peak_rss": peak[0],
        "daemon_constant_bytes_after_compile": early.constant_bytes,
        "daemon_constant_bytes": after.constant_bytes,
        "daemon_packed_weight_bytes": after.packed_weight_bytes,
        "daemon_plan_bytes": after.plan_bytes,
        "kiln_first_call_s": [c["first_s"] for c in clients],
        "kiln_correct": all(c["ok"] for c in clients),
        "eager_rss": [e["rss"] for e in eager],
    }
    print(f"{args.model}: {weight_bytes / MiB:.1f} MiB of weights and buffers; "
          f"{args.procs} processes at once")
    print(f"  daemon compiles: {compiles} (cache hits {out['daemon_cache_hits']}); "
          f"every result equal to eager: {out['kiln_correct']}")
    print("  time to first result per client: " +
          ", ".join(f"{c['first_s']:.2f} s" for c in clients))
    print(f"  daemon resident memory: {rss0 / MiB:.0f} MiB before; right after the compile "
          f"{rss_early / MiB:.0f} MiB (uploaded constants {early.constant_bytes / MiB:.0f} MiB, "
          f"packed weights {early.packed_weight_bytes / MiB:.0f} MiB)")
    print(f"  daemon peak resident memory (VmHWM, the compile included): {peak[0] / MiB:.0f} MiB, "
          f"{(peak[0] - rss0) / weight_bytes:.2f}x the weights above where it started")
    print(f"  after the {args.grace} s grace period: {rss1 / MiB:.0f} MiB, growth "
          f"{growth / MiB:.0f} MiB = {growth / weight_bytes:.2f}x the weights "
          f"(uploaded constants {after.constant_bytes / MiB:.0f} MiB, packed weights "
          f"{after.packed_weight_bytes / MiB:.0f} MiB, run arenas of {after.live_graphs} graph(s) "
          f"{after.plan_bytes / MiB:.0f} MiB); resident by kind: "
          + ", ".join(f"{k[3:].lower()} {v / MiB:.0f} MiB" for k, v in split.items()))
    anon_growth = split["RssAnon"] - split0["RssAnon"]
    print(f"  of which data (anonymous memory; the rest is the daemon's code and libraries "
          f"paged in): {anon_growth / MiB:.0f} MiB = {anon_growth / weight_bytes:.2f}x the weights")
    out["daemon_rss_split_before"] = split0
    out["daemon_rss_split_after_grace"] = split
    print(f"  eager: {args.procs} processes hold {args.procs} copies "
          f"({args.procs * weight_bytes / MiB:.0f} MiB of weights); their resident memory "
          + ", ".join(f"{r / MiB:.0f}" for r in out["eager_rss"]) + " MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
