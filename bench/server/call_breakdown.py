"""Where the time of one call goes: a whole model under backend="kiln".

For a model of the whole-model benchmark (bench/models/models.py), splits
the median call into

  - the daemon's run (what kilnd reports per call),
  - the hand-off (the call channel's wake-ups: channel call - daemon run;
    when the call goes through the C++ helper, native.channel_call, it
    also holds the copies of inputs and outputs that helper makes),
  - the client's own work (copying inputs into shared memory, checking
    that the weights are unchanged, allocating and filling outputs: the
    CompiledGraph call - channel call),
  - Dynamo (guards, frame handling and passing the weights as graph
    inputs: everything outside the CompiledGraph call),

and, for comparison, times Dynamo alone under the same pattern: a child
compiled with a backend that sleeps for the daemon's median run and
returns a precomputed output. Both kinds of child run in fresh processes,
interleaved round by round, against one private daemon.

    .venv/bin/python bench/server/call_breakdown.py [--model mobilenet_v3_large]
        [--batch 1] [--rounds 3] [--calls 200]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402

CHILD = r"""
import json, statistics, sys, time, torch
sys.path.insert(0, sys.argv[5])
import models
mode, name, batch, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(int(sys.argv[7]))
w = models.build(name, batch)
out = {"total_ms": []}
with torch.no_grad():
    if mode == "kiln":
        from kiln import backend, channel
        inner = {"compiled_ms": [], "channel_ms": [], "run_ms": []}
        call_graph = backend.CompiledGraph.__call__
        def timed_graph(self, *args):
            t = time.perf_counter()
            try:
                return call_graph(self, *args)
            finally:
                inner["compiled_ms"].append((time.perf_counter() - t) * 1e3)
        backend.CompiledGraph.__call__ = timed_graph
        call_channel = channel.Channel.call
        def timed_channel(self, *args, **kwargs):
            t = time.perf_counter()
            run_us = call_channel(self, *args, **kwargs)
            inner["channel_ms"].append((time.perf_counter() - t) * 1e3)
            inner["run_ms"].append(run_us / 1e3)
            return run_us
        channel.Channel.call = timed_channel
        call_native = channel.Channel.call_native
        def timed_native(self, *args, **kwargs):  # the whole call in C++
            t = time.perf_counter()
            got = call_native(self, *args, **kwargs)
            if got is not None:
                inner["channel_ms"].append((time.perf_counter() - t) * 1e3)
                inner["run_ms"].append(self.last_run_us / 1e3)
            return got
        channel.Channel.call_native = timed_native
        fn = torch.compile(w.model, backend="kiln")
    else:
        sleep_s = float(sys.argv[6]) / 1e3
        reference = w.model(*w.inputs)
        def sleeping_backend(gm, example_inputs):
            def run(*args):
                time.sleep(sleep_s)
                return (reference,)
            return run
        fn = torch.compile(w.model, backend=sleeping_backend)
    for _ in range(5):
        fn(*w.inputs)
    if mode == "kiln":
        for v in inner.values():
            v.clear()
    for _ in range(calls):
        t = time.perf_counter()
        fn(*w.inputs)
        out["total_ms"].append((time.perf_counter() - t) * 1e3)
    if mode == "kiln":
        out.update(inner)
print(json.dumps({k: statistics.median(v) for k, v in out.items()}))
"""


def run_child(mode: str, args: argparse.Namespace, env: dict, sleep_ms: float = 0.0) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, args.model, str(args.batch), str(args.calls),
         str(REPO / "bench" / "models"), f"{sleep_ms:.4f}", str(args.threads)],
        env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="mobilenet_v3_large")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()

    d = PrivateDaemon(find_kilnd(), threads=args.threads, extra_args=["--no-cache"])
    env = dict(os.environ, KILN_SOCKET=d.socket, KILN_AUTOSTART="0", KILN_CACHE_DIR=d.dir,
               PYTHONPATH=str(REPO / "client"))
    kiln_rounds, dynamo_rounds = [], []
    try:
        for r in range(args.rounds):
            k = run_child("kiln", args, env)
            kiln_rounds.append(k)
            dynamo_rounds.append(run_child("dynamo", args, env, sleep_ms=k["run_ms"]))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        d.stop()

    def med(rounds: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    total, compiled = med(kiln_rounds, "total_ms"), med(kiln_rounds, "compiled_ms")
    chan, run = med(kiln_rounds, "channel_ms"), med(kiln_rounds, "run_ms")
    dynamo_alone = med(dynamo_rounds, "total_ms") - med(kiln_rounds, "run_ms")
    print(f"{args.model} batch {args.batch}, {args.threads} threads, median of {args.calls} calls, "
          f"median of {args.rounds} rounds (ms):")
    rows = [
        ("call, end to end", total),
        ("  daemon's run", run),
        ("  hand-off (channel call - run)", chan - run),
        ("  client shim (graph call - channel call)", compiled - chan),
        ("  Dynamo (call - graph call)", total - compiled),
        ("Dynamo alone, same sleep (backend that sleeps)", dynamo_alone),
    ]
    for label, value in rows:
        print(f"  {label:48s} {value:7.3f}")
    print(json.dumps({"kiln": kiln_rounds, "dynamo": dynamo_rounds}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
