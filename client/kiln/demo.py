"""python -m kiln.demo: resnet18 through kilnd, compared with eager."""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from kiln import backend, cli
from kiln.connection import get_connection
from kiln.options import KilnOptions


def _median_ms(fn, x: torch.Tensor, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1)
    ns = parser.parse_args(argv)

    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval()
    x = torch.randn(ns.batch, 3, 224, 224)
    compiled = torch.compile(model, backend="kiln")

    with torch.no_grad():
        backend.reset_stats()
        start = time.perf_counter()
        got = compiled(x)
        first_s = time.perf_counter() - start
        want = model(x)
        diff = (got - want).abs().max().item()
        for _ in range(3):  # warm-up
            model(x)
            compiled(x)
        eager_ms = _median_ms(model, x, ns.runs)
        kiln_ms = _median_ms(compiled, x, ns.runs)

    s = backend.stats()
    print(f"resnet18, batch {ns.batch}, {torch.get_num_threads()} threads")
    print(f"  first call (compile):   {first_s:.2f} s")
    print(f"  max abs diff vs eager:  {diff:.2e}")
    print(f"  median latency:         eager {eager_ms:.2f} ms, kiln {kiln_ms:.2f} ms "
          f"({ns.runs} runs)")
    print(f"  FX nodes:               {s.nodes_in_daemon} in daemon, {s.nodes_in_eager} in eager "
          f"({s.partitions} partitions, {s.fallback_partitions} fell back)")
    opts = KilnOptions.from_mapping(None)
    conn = get_connection(opts.socket, opts.autostart, daemon_idle_min=opts.daemon_idle_min)
    print(cli.format_stats(conn.stats(), conn.socket_path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
