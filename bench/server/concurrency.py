"""Throughput of one client process vs two concurrent ones against one kilnd.

Starts a private daemon (own socket and cache directory, like
tests/python/conftest.py) and, for a small model whose batch-1 run cannot
fill two cores and a large one, measures executes per second of

  - one client process calling the compiled model in a loop, and
  - two client processes doing the same at the same time,

each under the default runtime config (hint "latency") and under
config={"hint": "throughput"}. Every client is its own process with its
own torch.compile(backend="kiln") on the same socket, so the daemon sees
what it sees in production: separate sessions, one shared compiled graph.

Each round measures both phases back to back (their order alternates from
round to round, and so does which client runs alone) with fixed-duration
windows after warm-up; the table shows medians over rounds. Throughput on a 2-core machine is only as good as the
machine is idle, so the table also shows how busy the cores were during the
two-client windows, split into this benchmark's processes and everything
else (from /proc/stat and the processes' CPU times).

    .venv/bin/python bench/server/concurrency.py            # both models, both hints
    .venv/bin/python bench/server/concurrency.py --models small --rounds 12
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "client"))

sys.path.insert(0, str(REPO / "bench"))

from private_daemon import PrivateDaemon  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ models --

def build_model(name: str):
    """(module, input) with fixed random weights; nothing is downloaded."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    if name == "small":
        # A few hundred microseconds of work at batch 1: every op is too
        # small to split usefully over two cores.
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
        x = torch.randn(1, 3, 32, 32)
    elif name == "large":
        import torchvision
        model = torchvision.models.resnet50(weights=None)
        x = torch.randn(1, 3, 224, 224)
    else:
        raise ValueError(f"unknown model {name!r} (small, large)")
    return model.eval(), x


MODEL_DESCRIPTIONS = {
    "small": "tiny CNN (2 conv, 2 linear), 1x3x32x32",
    "large": "torchvision resnet50, 1x3x224x224",
}
# Seconds per measuring window: long enough for many executes of each.
DEFAULT_WINDOW_S = {"small": 2.0, "large": 12.0}
# Rounds per model: the small model's rate moves most from window to window.
DEFAULT_ROUNDS = {"small": 8, "large": 3}
WARMUP_CALLS = {"small": 50, "large": 3}


# ----------------------------------------------------------------- clients --

def client_main(pipe, socket_path: str, model_name: str, config: dict | None) -> None:
    """One client process: compile, warm up, then run timed windows on command."""
    os.environ["KILN_SOCKET"] = socket_path
    os.environ["KILN_AUTOSTART"] = "0"
    import torch
    # Whatever stays in eager must not spread over the cores the daemon uses.
    torch.set_num_threads(1)
    model, x = build_model(model_name)
    options = {"config": config} if config else None
    compiled = torch.compile(model, backend="kiln", options=options)
    with torch.no_grad():
        expected = model(x)
        for _ in range(WARMUP_CALLS[model_name]):
            y = compiled(x)
    error = float((y - expected).abs().max() / expected.abs().max().clamp_min(1e-30))
    pipe.send(("ready", error))
    while True:
        cmd = pipe.recv()
        if cmd[0] == "stop":
            return
        _, start_at, window_s = cmd
        while time.monotonic() < start_at:
            time.sleep(0.001)
        cpu0 = time.process_time()
        t0 = time.monotonic()
        calls = 0
        with torch.no_grad():
            while True:
                compiled(x)
                calls += 1
                if time.monotonic() - t0 >= window_s:
                    break
        elapsed = time.monotonic() - t0
        pipe.send((calls, elapsed, time.process_time() - cpu0))


class Clients:
    """`n` client processes for one model and config."""

    def __init__(self, n: int, socket_path: str, model_name: str, config: dict | None):
        ctx = mp.get_context("spawn")  # no torch state inherited through fork
        self.pipes, self.procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=client_main, args=(child, socket_path, model_name, config),
                            daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)
        self.errors = []
        for pipe in self.pipes:  # one after the other: compiles do not race
            tag, error = pipe.recv()
            assert tag == "ready"
            self.errors.append(error)

    def run(self, count: int, window_s: float, first: int = 0) -> list[tuple[int, float, float]]:
        """Runs `count` clients from index `first` on for one window, starting together."""
        pipes = [self.pipes[(first + i) % len(self.pipes)] for i in range(count)]
        start_at = time.monotonic() + 0.2
        for pipe in pipes:
            pipe.send(("run", start_at, window_s))
        return [pipe.recv() for pipe in pipes]

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(("stop",))
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds over all cores since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])       # guest time is already inside user
    return (total - idle) / CLK_TCK, total / CLK_TCK


# --------------------------------------------------------------- measuring --

@dataclasses.dataclass
class Window:
    clients: int
    throughput: float     # executes per second, all clients together
    machine_busy: float   # fraction of all cores busy during the window
    ours_busy: float      # of which this benchmark's processes (daemon + clients)
    daemon_busy: float    # of which the daemon
    cpu_ms_per_exec: float  # daemon + clients CPU time per execute


def measure(clients: Clients, kilnd: PrivateDaemon, count: int, window_s: float,
            first: int = 0) -> Window:
    busy0, total0 = machine_busy_seconds()
    daemon0 = kilnd.cpu_seconds()
    results = clients.run(count, window_s, first)
    busy1, total1 = machine_busy_seconds()
    daemon1 = kilnd.cpu_seconds()
    throughput = sum(calls / elapsed for calls, elapsed, _ in results)
    total = max(total1 - total0, 1e-9)
    ours = (daemon1 - daemon0) + sum(cpu for _, _, cpu in results)
    calls = max(sum(c for c, _, _ in results), 1)
    return Window(count, throughput, (busy1 - busy0) / total, min(ours / total, 1.0),
                  (daemon1 - daemon0) / total, 1e3 * ours / calls)


@dataclasses.dataclass
class Row:
    model: str
    hint: str
    one: list[Window]
    two: list[Window]
    max_error: float

    def median(self, windows: list[Window], field: str) -> float:
        return statistics.median(getattr(w, field) for w in windows)

    @property
    def ratio(self) -> float:
        # Median of the per-round ratios: each round's two windows saw
        # about the same background load.
        return statistics.median(b.throughput / a.throughput for a, b in zip(self.one, self.two))


def run_case(kilnd: PrivateDaemon, model: str, hint: str, rounds: int, window_s: float) -> Row:
    config = None if hint == "default" else {"hint": hint}
    clients = Clients(2, kilnd.socket, model, config)
    try:
        one, two = [], []
        for r in range(rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for count in order:
                # The lone client alternates too: how the scheduler happens
                # to place one process against the daemon's threads moves
                # its rate by tens of percent, for the whole run.
                w = measure(clients, kilnd, count, window_s, first=(r // 2) % 2)
                (one if count == 1 else two).append(w)
                print(f"  {model:5s} {hint:10s} round {r + 1}: {count} client(s) "
                      f"{w.throughput:8.1f} exec/s, cores busy {w.machine_busy:4.0%} "
                      f"(ours {w.ours_busy:4.0%}, daemon {w.daemon_busy:4.0%}), "
                      f"{w.cpu_ms_per_exec:.2f} CPU ms/exec", flush=True)
        return Row(model, hint, one, two, max(clients.errors))
    finally:
        clients.close()


def print_table(rows: list[Row], threads: int) -> None:
    print()
    rounds = ", ".join(sorted({f"{r.model} {len(r.one)}" for r in rows}))
    print(f"kilnd --threads {threads}; {os.cpu_count()} cores; medians over rounds ({rounds}); "
          f"load average now {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print("| model | hint | 1 client exec/s | 2 clients exec/s | ratio 2/1 | "
          "cores busy (2 clients) | of which others | CPU ms/exec (1 / 2 clients) | "
          "max rel. error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        busy = row.median(row.two, "machine_busy")
        others = max(0.0, statistics.median(w.machine_busy - w.ours_busy for w in row.two))
        print(f"| {row.model} | {row.hint} | {row.median(row.one, 'throughput'):.1f} | "
              f"{row.median(row.two, 'throughput'):.1f} | {row.ratio:.2f}x | "
              f"{busy:.0%} | {others:.0%} | {row.median(row.one, 'cpu_ms_per_exec'):.2f} / "
              f"{row.median(row.two, 'cpu_ms_per_exec'):.2f} | {row.max_error:.1e} |")
    print()
    for name in sorted({r.model for r in rows}):
        print(f"{name}: {MODEL_DESCRIPTIONS[name]}")
    print("Targets: ratio >= 1.6x for the small model, >= 1.0x (no collapse) for the large one.")
    print("CPU ms/exec: daemon and client processes together, per execute; 'others': the")
    print("share of both cores other processes used during the 2-client windows.")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="small,large", help="comma list of small, large")
    parser.add_argument("--hints", default="default,throughput",
                        help="comma list of default, latency, throughput")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds per model and hint (default: 8 small, 3 large)")
    parser.add_argument("--window", type=float, default=None,
                        help="seconds per measuring window (default: 2 small, 12 large)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="kilnd --threads (default: all cores)")
    parser.add_argument("--kilnd", default=None,
                        help="daemon binary (default: build/server/kilnd, else kilnd on PATH)")
    args = parser.parse_args()

    binary = args.kilnd or next(
        (c for c in (os.environ.get("KILN_DAEMON"), str(REPO / "build" / "server" / "kilnd"),
                     shutil.which("kilnd")) if c and os.access(c, os.X_OK)), None)
    if binary is None:
        print("kilnd not found: build it or pass --kilnd", file=sys.stderr)
        return 2
    kilnd = PrivateDaemon(binary, args.threads, prefix="kiln-conc-")
    rows = []
    try:
        for model in args.models.split(","):
            for hint in args.hints.split(","):
                window = args.window or DEFAULT_WINDOW_S[model]
                rounds = args.rounds or DEFAULT_ROUNDS[model]
                rows.append(run_case(kilnd, model, hint, rounds, window))
    finally:
        kilnd.stop()
    print_table(rows, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
