"""Per-call overhead of backend="kiln": a one-op graph, end to end.

Starts a private daemon (own socket, no disk cache) and times a compiled
`x + 1` on a 1x16 tensor, where the daemon's work is nothing and every
microsecond is overhead: Dynamo's guards, the client shim, the hand-off to
the daemon and back. Three ways, in one run and interleaved round by
round, so machine noise hits them alike:

  - eager PyTorch, uncompiled (the floor),
  - torch.compile with backend="eager" (what Dynamo's guards and frame
    handling cost any backend),
  - kiln through call channels (shared memory and a futex; the default),
  - kiln through the Execute RPC (KILN_CALL_CHANNEL=0),

each as the median of --calls calls per round, then the median over
rounds. Each kiln variant runs in a child process of its own (the switch
is read when a connection opens).

    .venv/bin/python bench/server/call_overhead.py [--rounds 5] [--calls 2000]
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
import json, statistics, sys, time, torch
mode, calls = sys.argv[1], int(sys.argv[2])
def f(x):
    return x + 1
fn = f if mode == "eager" else torch.compile(
    f, backend="eager" if mode == "eager-backend" else "kiln")
x = torch.randn(1, 16)
with torch.no_grad():
    for _ in range(50):
        fn(x)
    ts = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t)
print(json.dumps({"median_us": statistics.median(ts) * 1e6,
                  "p99_us": sorted(ts)[int(len(ts) * 0.99)] * 1e6}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="kiln-overhead-")
    sock = os.path.join(workdir, "kilnd.sock")
    log = open(os.path.join(workdir, "kilnd.log"), "ab")
    proc = subprocess.Popen([daemon.find_daemon_binary(), "--socket", sock, "--no-cache",
                             "--log-level", "warn"], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not daemon.probe(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("kilnd did not start")
            time.sleep(0.05)
        env = dict(os.environ, KILN_SOCKET=sock, KILN_AUTOSTART="0",
                   PYTHONPATH=str(REPO / "client") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        variants = {"eager": {}, "Dynamo, backend='eager'": {},
                    "kiln (channel)": {"KILN_CALL_CHANNEL": "1"},
                    "kiln (gRPC Execute)": {"KILN_CALL_CHANNEL": "0"}}
        results: dict[str, list[dict]] = {k: [] for k in variants}
        for r in range(args.rounds):
            for name, extra in variants.items():
                mode = name.split()[0] if name == "eager" or name.startswith("kiln") else "dynamo"
                mode = {"eager": "eager", "kiln": "kiln", "dynamo": "eager-backend"}[mode]
                out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.calls)],
                                     env=dict(env, **extra), capture_output=True, text=True,
                                     check=True)
                results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"one-op graph (x + 1 on 1x16), median over {args.rounds} rounds "
          f"of {args.calls} calls each")
    print(f"{'':22s} {'median us':>10s} {'p99 us':>10s}")
    for name, rows in results.items():
        print(f"{name:22s} {statistics.median(r['median_us'] for r in rows):10.1f} "
              f"{statistics.median(r['p99_us'] for r in rows):10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
