"""options={"config": {...}}: validated, sent to the daemon, and applied there."""
from __future__ import annotations

import glob
import os

import pytest
import torch
from torch import nn

from kiln import backend

# bf16 keeps 8 significant bits: a few layers of 256-wide products land
# about 1e-3 off (relative to the output's scale); allow 3e-2.
BF16_TOLERANCE = 3e-2


def _mlp() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.GELU(),
                          nn.Linear(256, 64)).eval()
    return model, torch.randn(8, 256)


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def _run(model: nn.Module, x: torch.Tensor, config: dict | None) -> torch.Tensor:
    torch._dynamo.reset()
    options = {"config": config} if config is not None else None
    compiled = torch.compile(model, backend="kiln", options=options)
    with torch.no_grad():
        return compiled(x)


def test_bf16_precision_is_within_bf16_tolerance_of_eager(daemon_up):
    model, x = _mlp()
    with torch.no_grad():
        want = model(x)
    got = _run(model, x, {"precision": "bf16"})
    s = backend.stats()
    assert s.nodes_in_eager == 0 and s.fallback_partitions == 0, s
    assert _relative_error(got, want) <= BF16_TOLERANCE


def test_bf16_precision_changes_the_result(daemon_up):
    # Without native bf16 dot products the daemon runs precision=bf16 in f32
    # (docs/options.md, config): the results are then identical.
    from kiln.connection import get_connection
    if "avx512_bf16" not in get_connection().capabilities().cpu_features:
        pytest.skip("this CPU has no avx512_bf16; bf16 runs in f32")
    model, x = _mlp()
    f32 = _run(model, x, None)
    bf16 = _run(model, x, {"precision": "bf16"})
    assert not torch.equal(f32, bf16)
    assert _relative_error(bf16, f32) <= BF16_TOLERANCE


def test_threads_and_hint_give_the_same_result(daemon_up):
    model, x = _mlp()
    with torch.no_grad():
        want = model(x)
    for config in ({"num_threads": 1}, {"hint": "throughput"},
                   {"num_threads": 2, "hint": "latency"}):
        got = _run(model, x, config)
        assert _relative_error(got, want) <= 1e-5, config


def test_config_reaches_the_daemon(daemon_up, tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    monkeypatch.setenv("KILN_CONFIG", "num_threads=1,precision=bf16")
    model, x = _mlp()
    _run(model, x, {"hint": "throughput"})
    dumps = glob.glob(os.path.join(tmp_path, "*.txt"))
    assert dumps
    header = open(dumps[0]).readline()
    assert "num_threads=1 hint=throughput precision=bf16" in header, header


def test_bad_config_is_an_error_listing_valid_keys(daemon_up):
    model, x = _mlp()
    compiled = torch.compile(model, backend="kiln", options={"config": {"hint": "fastest"}})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(x)
    assert "latency, throughput" in str(info.value)


class _Inception(nn.Module):
    """Three convolutions of one input side by side, concatenated: steps the
    daemon may run concurrently (config branches)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(16, 16, 1)
        self.b = nn.Conv2d(16, 16, 3, padding=1)
        self.c = nn.Conv2d(16, 16, 5, padding=2)
        self.head = nn.Linear(48, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x)), torch.relu(self.c(x))], 1)
        return self.head(y.mean((2, 3)))


def test_branches_give_the_same_result_and_show_in_the_dump(daemon_up, tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    torch.manual_seed(0)
    model, x = _Inception().eval(), torch.randn(1, 16, 24, 24)
    with torch.no_grad():
        want = model(x)
    results = {}
    for mode in ("off", "auto", "on"):
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="kiln",
                                 options={"config": {"branches": mode, "num_threads": 2}})
        with torch.no_grad():
            for _ in range(6):  # past the daemon's calibration runs
                results[mode] = compiled(x)
        assert _relative_error(results[mode], want) <= 1e-5, mode
    assert torch.allclose(results["on"], results["off"], rtol=0, atol=1e-6)
    dumps = [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.txt"))]
    on = [d for d in dumps if "branches=on" in d.splitlines()[0]]
    assert on and "|| wave" in on[0], on
    off = [d for d in dumps if "branches=off" in d.splitlines()[0]]
    assert off and "|| wave" not in off[0]


@pytest.mark.parametrize("layout", ["nchw", "blocked"])
def test_cat_inputs_computed_in_place_give_the_eager_result(daemon_up, tmp_path, monkeypatch,
                                                            layout):
    # At batch 1 the three convolutions write straight into the cat's bytes
    # (runtime/plan/joined_in_place.h); the dump marks the cat.
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    torch.manual_seed(0)
    model, x = _Inception().eval(), torch.randn(1, 16, 24, 24)
    with torch.no_grad():
        want = model(x)
        got = _run(model, x, {"layout": layout})
    assert _relative_error(got, want) <= 1e-5
    dumps = [open(p).read() for p in glob.glob(os.path.join(tmp_path, "*.txt"))]
    cats = [line for d in dumps for line in d.splitlines() if "aten.cat.default" in line]
    assert cats and all("(inputs computed in place)" in line for line in cats), dumps
