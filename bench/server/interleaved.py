"""A model whose Kiln partitions alternate with nodes left in eager PyTorch.

Each block is a convolution, batch norm and ReLU (Kiln runs them in the
daemon) followed by an op Kiln leaves to eager PyTorch (`logcumsumexp`
over the channels), so a call goes client -> daemon -> client -> daemon
... once per block. While the daemon runs a partition the client waits;
while the client runs the eager op the daemon waits. Threads that
spin-wait on either side after their part (PyTorch's OpenMP pool in the
client, the daemon's workers kept warm for the next run) take cores from
the side that works next: this measures what that costs, against
Inductor, which compiles the whole model into the user's process.

Variants, each in a child process of its own, interleaved round by round
so machine noise hits them alike:

  - eager                     PyTorch, uncompiled
  - inductor                  torch.compile, Inductor with freezing
  - kiln                      the defaults: while it waits for a run, the
                              client puts PyTorch's OpenMP workers to sleep
                              if they are spinning (client/native/omp_park.h)
  - kiln, no parking          without that (KILN_OMP_PARK=0)
  - kiln, no flag, no parking neither parking nor the request flag that
                              lets the daemon's threads sleep after a run
                              the client's eager work follows: Kiln before
                              either measure
  - kiln, daemon no spin      the daemon's workers sleep right after a run
                              (kilnd --spin-us 0)
  - kiln, client passive omp  no parking, and the client's OpenMP threads
                              sleep right after every op (OMP_WAIT_POLICY=
                              passive, which must be set before torch is
                              imported: what parking approaches without it)

Every variant uses --threads threads (client and daemon alike). The figure
is the median over rounds of each round's median call time.

    .venv/bin/python bench/server/interleaved.py [--rounds 5] [--calls 40] [--blocks 6]
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
import json, statistics, sys, time
import torch
mode, calls, blocks, channels, size, threads = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
torch.set_num_threads(threads)
torch.manual_seed(0)

class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c)
    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return torch.logcumsumexp(y, dim=1) * 0.1

model = torch.nn.Sequential(*[Block(channels) for _ in range(blocks)]).eval()
x = torch.randn(1, channels, size, size)
with torch.no_grad():
    expected = model(x)
    if mode == "inductor":
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        fn = torch.compile(model, backend="inductor")
    elif mode in ("kiln", "kiln-noflag"):
        if mode == "kiln-noflag":
            from kiln import backend
            backend._eager_compute_follows = lambda node: False
        fn = torch.compile(model, backend="kiln")
    else:
        fn = model
    out = fn(x)
    err = ((out - expected).abs().max() / expected.abs().max()).item()
    partitions = parked = None
    if mode.startswith("kiln"):
        import kiln
        from kiln import native
        partitions = kiln.explain(model, x).partitions
        parked_before = native.parked_calls() if native.parked_calls else 0
    for _ in range(5):
        fn(x)
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t)
    if mode.startswith("kiln") and native.parked_calls:
        parked = (native.parked_calls() - parked_before) / calls
print(json.dumps({"median_ms": statistics.median(ts) * 1e3, "rel_err": err,
                  "partitions": partitions, "parked": parked}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=40, help="timed calls per variant and round")
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--size", type=int, default=56, help="height and width of the input")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()

    kilnd = find_kilnd()
    daemons = {"default": PrivateDaemon(kilnd, threads=args.threads,
                                        prefix="kiln-interleaved-"),
               "no-spin": PrivateDaemon(kilnd, threads=args.threads,
                                        extra_args=["--spin-us", "0"],
                                        prefix="kiln-interleaved-")}
    pythonpath = str(REPO / "client") + os.pathsep + os.environ.get("PYTHONPATH", "")
    base = dict(os.environ, KILN_AUTOSTART="0", PYTHONPATH=pythonpath)
    for var in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KILN_OMP_PARK"):
        base.pop(var, None)
    variants = {
        "eager": ("eager", "default", {}),
        "inductor": ("inductor", "default", {}),
        "kiln": ("kiln", "default", {}),
        "kiln, no parking": ("kiln", "default", {"KILN_OMP_PARK": "0"}),
        "kiln, no flag, no parking": ("kiln-noflag", "default", {"KILN_OMP_PARK": "0"}),
        "kiln, daemon no spin": ("kiln", "no-spin", {}),
        "kiln, client passive omp": ("kiln", "default",
                                     {"OMP_WAIT_POLICY": "passive", "KILN_OMP_PARK": "0"}),
    }
    results: dict[str, list[dict]] = {k: [] for k in variants}
    try:
        for r in range(args.rounds):
            for name, (mode, which, extra) in variants.items():
                env = dict(base, KILN_SOCKET=daemons[which].socket, **extra)
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, mode, str(args.calls), str(args.blocks),
                     str(args.channels), str(args.size), str(args.threads)],
                    env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for d in daemons.values():
            d.stop()

    print(f"{args.blocks} blocks of conv{args.channels}+bn+relu (daemon) and logcumsumexp "
          f"(eager) on 1x{args.channels}x{args.size}x{args.size}, {args.threads} threads; "
          f"median over {args.rounds} rounds of the median of {args.calls} calls")
    inductor_ms = statistics.median(r["median_ms"] for r in results["inductor"])
    print(f"{'':26s} {'ms':>8s} {'vs inductor':>12s} {'rel err':>9s} {'partitions':>10s} "
          f"{'parked/call':>11s}")
    for name, rows in results.items():
        ms = statistics.median(r["median_ms"] for r in rows)
        parts, parked = rows[0]["partitions"], rows[-1]["parked"]
        print(f"{name:26s} {ms:8.2f} {inductor_ms / ms:11.2f}x {max(r['rel_err'] for r in rows):9.1e} "
              f"{'' if parts is None else parts:>10} "
              f"{'' if parked is None else format(parked, '.1f'):>11}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
