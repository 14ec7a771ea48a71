"""Where a model's time goes inside ONNX Runtime: per op kind.

The reference's side of op_profile.py: exports one model of a suite as the
benchmark's ONNX Runtime backend does (backends.py), runs it with ONNX
Runtime's own profiler on, and prints each op kind's kernel time per call
(convolutions split into dense and depthwise by their group count, as
op_profile.py --nodes shows Kiln's), with the session's median call time
without the profiler beside it. Compare the two before blaming a kernel:
what is left over is outside the kernels.

    .venv/bin/python bench/models/ort_profile.py --suite timm fbnetc_100
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402

import workloads  # noqa: E402
from backends import OnnxRuntime  # noqa: E402


def conv_groups(path: str) -> dict[str, int]:
    """Every Conv's group count, by each name its result goes by (the conv's
    outputs and those of the activations and adds ONNX Runtime fuses into
    it, which its profiler names the fused node after)."""
    import onnx

    graph = onnx.load(path).graph
    producer = {o: n for n in graph.node for o in n.output}
    groups: dict[str, int] = {}
    for n in graph.node:
        if n.op_type != "Conv":
            continue
        groups[n.output[0]] = next((a.i for a in n.attribute if a.name == "group"), 1)
    # Names downstream of a conv through one fusible op.
    for n in graph.node:
        if n.op_type in ("Relu", "Clip", "Add", "Sigmoid", "HardSigmoid", "Mul", "HardSwish"):
            src = next((i for i in n.input if i in groups), None)
            if src is not None:
                groups.setdefault(n.output[0], groups[src])
    return {name: g for name, g in groups.items() if name in producer}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--suite", default="models", choices=workloads.SUITES)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()

    import onnxruntime as ort

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    w = workloads.build(args.suite, args.model, args.batch)
    backend = OnnxRuntime(args.threads)
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-ort-profile-") as tmp:
            path = os.path.join(tmp, "model.onnx")
            with torch.no_grad():
                backend._export(w.model.eval(), w.inputs, w.input_names, path)
            groups = conv_groups(path)
            feeds = None
            medians = {}
            for profiled in (False, True):
                opts = ort.SessionOptions()
                opts.intra_op_num_threads = args.threads
                opts.inter_op_num_threads = 1
                opts.enable_profiling = profiled
                opts.profile_file_prefix = os.path.join(tmp, "profile")
                session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                names = [i.name for i in session.get_inputs()]
                positions = {n: k for k, n in enumerate(w.input_names)}
                feeds = {n: w.inputs[positions[n]].numpy() for n in names}
                for _ in range(3):
                    session.run(None, feeds)
                times = []
                for _ in range(args.calls):
                    start = time.perf_counter()
                    session.run(None, feeds)
                    times.append(time.perf_counter() - start)
                medians[profiled] = 1e3 * statistics.median(times)
                if profiled:
                    events = json.load(open(session.end_profiling()))
    finally:
        backend.close()
    total: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    runs = args.calls + 3
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        op = e.get("args", {}).get("op_name", "?")
        if op == "Conv":
            name = e["name"][: -len("_kernel_time")].removesuffix("_nchwc")
            g = groups.get(name)
            op = "Conv (depthwise)" if g and g > 1 else "Conv" if g else "Conv (unmatched)"
        total[op] += e["dur"]
        count[op] += 1
    print(f"{args.suite}/{args.model} batch {args.batch}, {args.threads} threads: session median "
          f"{medians[False]:.2f} ms per call ({medians[True]:.2f} with the profiler); kernel time "
          f"per call by op kind (over {runs} profiled calls)")
    print(f"  {'ms/call':>8}  {'nodes':>5}  op")
    for op, us in total.most_common():
        print(f"  {us / runs / 1000:8.3f}  {count[op] // runs:5d}  {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
