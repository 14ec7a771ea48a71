"""A switch on and off, on one whole model, timed call by call in turn.

The daemon reads its kernel switches (KILN_WINOGRAD, KILN_NARROW_GROUPS,
KILN_PANEL_ROWS, ...) from its environment. This starts two private
daemons, one with VAR=1 and one with VAR=0, compiles the model once
against each and times their calls alternately in one process, so that
drift in the host's speed (20% between runs on shared VMs) falls on both
sides alike. Each model's weights are evicted by the other's call, as in a
process that runs more than one model. Prints both medians, their ratio
and each side's largest difference from eager relative to the output's
scale.

With --option instead of --var the switch is a boolean option of the
backend (torch.compile options, e.g. dict_tag_guards): one daemon, and two
copies of the model compiled with the option True and False.

With --native the switch is the client's C++ helpers (kiln/native.py: the
weight check, streaming input copies and whole channel calls; --helpers
picks some): one daemon, one compiled model, the helpers on for one call
and off for the next.

With --binaries NEW OLD the switch is the daemon itself: two kilnd
builds (say, of two commits, for a change that has no switch), NEW as
side 1 and OLD as side 0.

--suite picks the model from a benchmark suite (bench/suites) instead of
bench/models' list.

    .venv/bin/python bench/models/switch_ab.py --model vit_b_16 --var KILN_PANEL_ROWS
        [--batch 1] [--calls 10] [--threads 2]
    .venv/bin/python bench/models/switch_ab.py --model mobilenet_v2 --option dict_tag_guards
    .venv/bin/python bench/models/switch_ab.py --model regnet_y_400mf --native
    .venv/bin/python bench/models/switch_ab.py --suite huggingface --model BertForMaskedLM \
        --binaries build/server/kilnd /tmp/old/server/kilnd
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "models"))
sys.path.insert(0, str(REPO / "client"))

import torch  # noqa: E402

import models  # noqa: E402
import workloads  # noqa: E402
from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True,
                   help=f"one of: {', '.join(models.MODELS)}; or of --suite's models")
    p.add_argument("--suite", default="models", choices=workloads.SUITES)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--var", help="the daemon's switch, e.g. KILN_PANEL_ROWS")
    which.add_argument("--option", help="a boolean backend option, e.g. dict_tag_guards")
    which.add_argument("--native", action="store_true",
                       help="the client's C++ helpers on against off")
    which.add_argument("--binaries", nargs=2, metavar=("NEW", "OLD"),
                       help="two kilnd builds: NEW is side 1, OLD side 0")
    p.add_argument("--helpers", default="weights_unchanged,stream_copy,channel_call",
                   help="with --native: which of kiln.native's helpers to switch")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--calls", type=int, default=10, help="timed calls per side")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = p.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    work = workloads.build(args.suite, args.model, args.batch)
    os.environ["KILN_AUTOSTART"] = "0"
    name = args.var or args.option or ("new" if args.binaries else "native")
    daemons = {}
    # What to do before each side's call (only --native switches per call).
    before = {"1": lambda: None, "0": lambda: None}

    def start_daemon(binary: str | None = None) -> PrivateDaemon:
        return PrivateDaemon(binary or find_kilnd(), threads=args.threads,
                             extra_args=["--no-cache"], prefix="kiln-ab-")
    try:
        if args.binaries:
            for value, binary in zip(("1", "0"), args.binaries):
                if not os.access(binary, os.X_OK):
                    p.error(f"not an executable: {binary}")
                daemons[value] = start_daemon(binary)
            options = {v: {"socket": d.socket} for v, d in daemons.items()}
            # Separate modules: Dynamo keeps one compiled frame per object.
            copies = {"1": work.model, "0": copy.deepcopy(work.model)}
        elif args.var:
            saved = os.environ.get(args.var)
            for value in ("1", "0"):
                os.environ[args.var] = value  # inherited by the daemon's process
                daemons[value] = start_daemon()
            if saved is None:
                del os.environ[args.var]
            else:
                os.environ[args.var] = saved
            options = {v: {"socket": d.socket} for v, d in daemons.items()}
            copies = {v: work.model for v in daemons}
        elif args.native:
            from kiln import native
            if native.weights_unchanged is None:
                p.error("the C++ helper is not loaded (make setup builds it; KILN_NATIVE=0?)")
            helpers = {h: getattr(native, h) for h in args.helpers.split(",")}
            before = {"1": lambda: [setattr(native, h, f) for h, f in helpers.items()],
                      "0": lambda: [setattr(native, h, None) for h in helpers]}
            daemons["1"] = start_daemon()
            options = {v: {"socket": daemons["1"].socket} for v in ("1", "0")}
            copies = {v: work.model for v in ("1", "0")}
        else:
            daemons["1"] = start_daemon()
            options = {v: {"socket": daemons["1"].socket, args.option: v == "1"}
                       for v in ("1", "0")}
            # Separate modules: Dynamo keeps one compiled frame per object.
            copies = {"1": work.model, "0": copy.deepcopy(work.model)}
        with torch.no_grad():
            want = work.model(*work.inputs)
            scale = want.abs().max().item() or 1.0
            compiled = {v: torch.compile(copies[v], backend="kiln", options=options[v])
                        for v in ("1", "0")}
            for v, fn in compiled.items():
                before[v]()
                got = fn(*work.inputs)
                diff = (got - want).abs().max().item() / scale
                print(f"{name}={v}: max|out - eager| / max|eager| = {diff:.1e}")
            times = {v: [] for v in compiled}
            for _ in range(args.calls):
                for v, fn in compiled.items():
                    before[v]()
                    start = time.perf_counter()
                    fn(*work.inputs)
                    times[v].append(time.perf_counter() - start)
    finally:
        for d in daemons.values():
            d.stop()
    on, off = (statistics.median(times[v]) * 1e3 for v in ("1", "0"))
    print(f"{args.model} batch {args.batch}: {name}=1 {on:.2f} ms, {name}=0 {off:.2f} ms "
          f"(median of {args.calls}); off / on = {off / on:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
