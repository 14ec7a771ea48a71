"""Dynamo's own cost per call, with the caller's caches warm and cold.

A backend that returns a precomputed output at once leaves only what
Dynamo does around a compiled graph: evaluating its guards (one per
parameter, since parameters are graph inputs) and handling the frame. Back
to back, that data stays in the caches; in a real call the backend's work
(for Kiln, the daemon's run on both cores) evicts it first. This script
times both cases in one process: calls back to back, then calls each
preceded by a pass over a 64 MiB buffer. Optionally with one of
torch.compiler's guard filters (PyTorch's own, documented as unsafe: they
drop guards on module attributes, which a model served unchanged does not
need), passed as options={"guard_filter_fn": ...}; or with Dynamo's
use_recursive_dict_tags_for_guards (a global Dynamo setting, off by
default, that skips a module's guards while the version tags of its
attribute dicts are unchanged; it drops no guard).

    .venv/bin/python bench/server/dynamo_cold.py [--model regnet_y_400mf]
        [--calls 200] [--guard-filter skip_guard_on_all_nn_modules_unsafe]
        [--dict-tags]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))

import models  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="regnet_y_400mf")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--guard-filter", default="",
                   help="a torch.compiler guard filter function, by name")
    p.add_argument("--dict-tags", action="store_true",
                   help="set torch._dynamo.config.use_recursive_dict_tags_for_guards")
    args = p.parse_args()

    w = models.build(args.model, 1)
    junk = np.ones((64 << 20) // 4, dtype=np.float32)
    inputs_seen = []

    def instant_backend(gm, example_inputs):
        inputs_seen.append(len(example_inputs))
        out = gm(*example_inputs)
        return lambda *call_args: out

    torch._dynamo.config.use_recursive_dict_tags_for_guards = args.dict_tags
    options = {}
    if args.guard_filter:
        options["guard_filter_fn"] = getattr(torch.compiler, args.guard_filter)
    with torch.no_grad():
        fn = torch.compile(w.model, backend=instant_backend, options=options or None)
        for _ in range(5):
            fn(*w.inputs)
        result = {}
        for label, evict in (("warm", False), ("cold", True)):
            times = []
            for _ in range(args.calls):
                if evict:
                    junk += 1.0
                t = time.perf_counter()
                fn(*w.inputs)
                times.append(time.perf_counter() - t)
            result[label] = statistics.median(times) * 1e3
    print(f"{args.model}: {inputs_seen[0]} graph inputs, guard filter "
          f"{args.guard_filter or 'none'}, recursive dict tags "
          f"{'on' if args.dict_tags else 'off'}; Dynamo per call, median of {args.calls}: "
          f"warm {result['warm']:.3f} ms, after a 64 MiB pass {result['cold']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
