"""Where a model's time goes inside the daemon: per op, or per node.

Starts a private kilnd with KILN_PROFILE set, compiles one model of a
suite through backend="kiln", runs it, stops the daemon and prints the
profile table the daemon logs on shutdown (most time first), with the
client's own median call time beside it. Use it before changing a kernel
for a model that is behind a reference: it names the ops (or, with
--nodes, the fused steps) that hold the time.

    .venv/bin/python bench/models/op_profile.py --suite timm poolformer_m36
    .venv/bin/python bench/models/op_profile.py --suite timm eca_botnext26ts_256 --nodes --top 15
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402

import workloads  # noqa: E402
from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402

ROW = re.compile(r"info\s+(\S.*?)\s+calls=(\d+)\s+total_ms=([\d.]+)\s+pct=([\d.]+)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--suite", default="models", choices=workloads.SUITES)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=10, help="profiled calls after the warm-up")
    ap.add_argument("--nodes", action="store_true", help="per node instead of per op")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--top", type=int, default=25, help="rows to print")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    os.environ["KILN_PROFILE"] = "nodes" if args.nodes else "1"
    daemon = PrivateDaemon(find_kilnd(), threads=args.threads,
                           extra_args=["--log-level", "info"], prefix="kiln-profile-")
    os.environ.update(KILN_SOCKET=daemon.socket, KILN_AUTOSTART="0")
    try:
        torch.manual_seed(0)
        w = workloads.build(args.suite, args.model, args.batch)
        with torch.no_grad():
            compiled = torch.compile(w.model.eval(), backend="kiln")
            for _ in range(3):
                compiled(*w.inputs)
            times = []
            for _ in range(args.calls):
                start = time.perf_counter()
                compiled(*w.inputs)
                times.append(time.perf_counter() - start)
    finally:
        daemon.proc.send_signal(2)  # the profile is logged on shutdown
        daemon.proc.wait(60)
        log = open(daemon.log_path, errors="replace").read()
        daemon.stop()
    rows = [(m.group(1), int(m.group(2)), float(m.group(3)), float(m.group(4)))
            for m in ROW.finditer(log)]
    if not rows:
        print("no profile in the daemon's log:\n" + log[-3000:])
        return 1
    runs = args.calls + 3  # every call the daemon ran, warm-up included
    print(f"{args.suite}/{args.model} batch {args.batch}, {args.threads} threads: client median "
          f"{statistics.median(times) * 1e3:.2f} ms per call; daemon time per call by "
          f"{'node' if args.nodes else 'op'} (over {runs} calls, compile-time runs included)")
    print(f"{'ms/call':>9s} {'share':>6s} {'runs/call':>9s}  what")
    for what, calls, total_ms, pct in rows[:args.top]:
        print(f"{total_ms / runs:9.3f} {pct:5.1f}% {calls / runs:9.1f}  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
