"""Whole-model latency: eager PyTorch vs Kiln vs TorchInductor, same run.

Reports the median of repeated runs (after warm-up) and each backend's
ratio to eager, plus the max abs difference of its output against eager.

    .venv/bin/python bench/models/compare.py --model resnet18 --batch 1
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch
import torchvision


def median_ms(fn: Callable[[], torch.Tensor], runs: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", default="eager,kiln,inductor",
                        help="comma-separated subset of eager,kiln,inductor")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().eval()
    x = torch.randn(args.batch, 3, 224, 224)
    with torch.no_grad():
        reference = model(x)

    rows = []
    for name in args.backends.split(","):
        torch._dynamo.reset()
        fn = model if name == "eager" else torch.compile(model, backend=name)
        with torch.no_grad():
            t0 = time.perf_counter()
            out = fn(x)
            first_ms = (time.perf_counter() - t0) * 1e3
            diff = (out - reference).abs().max().item()
            ms = median_ms(lambda: fn(x), args.runs, args.warmup)
        rows.append((name, ms, first_ms, diff))

    eager_ms = next((ms for n, ms, _, _ in rows if n == "eager"), None)
    print(f"{args.model} batch {args.batch}, torch threads {torch.get_num_threads()}, "
          f"median of {args.runs} runs")
    print(f"{'backend':<10}{'median ms':>11}{'speedup':>10}{'first call ms':>15}{'max|diff|':>12}")
    for name, ms, first_ms, diff in rows:
        ratio = f"{eager_ms / ms:.2f}x" if eager_ms else "-"
        print(f"{name:<10}{ms:>11.2f}{ratio:>10}{first_ms:>15.0f}{diff:>12.2e}")


if __name__ == "__main__":
    main()
