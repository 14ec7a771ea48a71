"""Client processes for tests/python/test_shared_cache.py: each one compiles
small CNNs against a given daemon and checks them against eager.

They are separate processes (multiprocessing, spawn) because what is under
test is several clients, and several daemons, sharing one cache; threads in
the test process would share one connection and one Dynamo cache instead.
"""
from __future__ import annotations

import os
import traceback
from dataclasses import dataclass

# fp32 convolutions reordered by the daemon's kernels: not bit-exact with eager.
RTOL = 1e-4
ATOL = 1e-5


@dataclass(frozen=True)
class CnnSpec:
    """A small CNN, fixed by its seed and width; one Dynamo graph."""

    seed: int
    width: int
    layers: int = 3
    size: int = 16  # input height and width
    batch_norm: bool = False  # a BatchNorm2d after each convolution (folded by the daemon)


def build(spec: CnnSpec):
    import torch
    from torch import nn

    torch.manual_seed(spec.seed)
    blocks: list[nn.Module] = []
    channels = 3
    for _ in range(spec.layers):
        blocks.append(nn.Conv2d(channels, spec.width, 3, padding=1))
        if spec.batch_norm:
            bn = nn.BatchNorm2d(spec.width)
            with torch.no_grad():  # eval-mode statistics that are not the identity
                bn.running_mean.uniform_(-0.2, 0.2)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
            blocks.append(bn)
        blocks.append(nn.ReLU())
        channels = spec.width
    model = nn.Sequential(*blocks, nn.Flatten(),
                          nn.Linear(spec.width * spec.size * spec.size, 10)).eval()
    x = torch.randn(1, 3, spec.size, spec.size)
    return model, x


def compile_and_check(socket: str, specs: list[CnnSpec], start=None, finish=None) -> dict:
    """Compiles each model on the daemon at `socket` (never starting one),
    runs it once and compares with eager. `start` and `finish` are barriers
    waited on before the first compile and after the last one. Returns the
    backend's counters; raises on a wrong result or a partition left eager."""
    os.environ["KILN_SOCKET"] = socket
    os.environ["KILN_AUTOSTART"] = "0"
    import torch
    from kiln import backend

    built = [build(spec) for spec in specs]
    if start is not None:
        start.wait(timeout=120)
    compiled = []
    with torch.no_grad():
        for spec, (model, x) in zip(specs, built):
            fn = torch.compile(model, backend="kiln")
            torch.testing.assert_close(fn(x), model(x), rtol=RTOL, atol=ATOL,
                                       msg=lambda m, spec=spec: f"{spec}: {m}")
            compiled.append(fn)  # keeps the daemon's graph alive until `finish`
    stats = backend.stats()
    if stats.nodes_in_eager or stats.fallback_partitions:
        raise AssertionError(f"not all in the daemon: {stats}")
    if finish is not None:
        finish.wait(timeout=120)
    return {"partitions": stats.partitions, "graphs": stats.graphs}


def run_client(results, index: int, *args) -> None:
    """Process entry point: puts (index, counters or a traceback) on `results`."""
    try:
        results.put((index, compile_and_check(*args)))
    except BaseException:  # noqa: BLE001 - reported to the test instead
        results.put((index, traceback.format_exc()))
