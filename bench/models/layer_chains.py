"""Kiln against ONNX Runtime on chains of one convolution layer kind.

Where a mobile network is behind, op_profile.py shows the time in its
convolutions; this says which kind and which sizes. Each case is a chain
of eight identical layers (so a call is mostly the layers, not its
overhead): 1x1 convolutions expanding by 6 and projecting back (`pw`),
3x3 depthwise convolutions (`dw`, each with its ReLU), or MobileNetV2's
inverted-residual block without the residual (`block`), at the
resolutions and widths of an ImageNet mobile network. Every backend is
timed in its own process, one after another, so no runtime's idle threads
take cores from another's.

    .venv/bin/python bench/models/layer_chains.py
    .venv/bin/python bench/models/layer_chains.py --kinds dw --threads 1
"""
from __future__ import annotations

import argparse
import io
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import host  # noqa: E402

# (resolution, channels into the expansion, expansion)
SHAPES = [(56, 24, 6), (28, 32, 6), (14, 64, 6), (14, 112, 6), (7, 184, 6)]
LAYERS = 8


def build(kind: str, hw: int, c: int, e: int):
    import torch
    from torch import nn

    layers = []
    for _ in range(LAYERS):
        if kind == "pw":
            layers += [nn.Conv2d(c, c * e, 1), nn.ReLU(), nn.Conv2d(c * e, c, 1)]
        elif kind == "dw":
            layers += [nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e), nn.ReLU()]
        else:
            layers += [nn.Conv2d(c, c * e, 1), nn.ReLU(),
                       nn.Conv2d(c * e, c * e, 3, padding=1, groups=c * e), nn.ReLU(),
                       nn.Conv2d(c * e, c, 1)]
    torch.manual_seed(0)
    model = nn.Sequential(*layers).eval()
    x = torch.randn(1, c * e if kind == "dw" else c, hw, hw)
    return model, x


def time_one(backend: str, kind: str, shape: tuple, threads: int, calls: int) -> float:
    """Median ms of one call; runs in a process of its own."""
    import torch

    torch.set_num_threads(threads)
    model, x = build(kind, *shape)
    with torch.no_grad():
        if backend == "kiln":
            fn = torch.compile(model, backend="kiln",
                               options={"config": {"num_threads": threads}})
            run = lambda: fn(x)  # noqa: E731
        else:
            import onnxruntime as ort

            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, dynamo=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
            feed = {sess.get_inputs()[0].name: x.numpy()}
            run = lambda: sess.run(None, feed)  # noqa: E731
        for _ in range(5):
            run()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", default="pw,dw,block")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args()
    _, flags = host.cpuinfo()
    print(f"host: {host.isa_class(flags)}, {args.threads} threads; {LAYERS} layers a chain; "
          "median ms of a call; each backend in its own process")
    print(f"{'kind':6} {'shape':22} {'kiln':>8} {'onnxruntime':>12} {'ort/kiln':>9}")
    ctx = mp.get_context("spawn")
    for kind in args.kinds.split(","):
        for shape in SHAPES:
            ms = {}
            for backend in ("kiln", "onnxruntime"):
                with ctx.Pool(1) as pool:
                    ms[backend] = pool.apply(time_one, (backend, kind, shape, args.threads,
                                                        args.calls))
            hw, c, e = shape
            print(f"{kind:6} {f'{hw}x{hw} c={c} e={e}':22} {ms['kiln']:8.3f} "
                  f"{ms['onnxruntime']:12.3f} {ms['onnxruntime'] / ms['kiln']:8.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
