"""The client's lowering cache (kiln/lowering_cache.py) with the real daemon:
a second process takes the lowered, partitioned graph from disk and still
computes eager's answer (fallback nodes included), bad entries are misses,
model_caching=False writes nothing, the key follows the model's structure
and not its weights, and `kiln cache` sees the entries.

Results are compared with eager at rtol 1e-4, atol 1e-5: the daemon's fp32
convolutions sum in another order than eager's, so they are not bit-exact.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import sys

import pytest
import torch
from torch import nn

import kiln
from kiln import backend, cache_files, cli, lowering_cache

RTOL = 1e-4
ATOL = 1e-5
HERE = os.path.dirname(os.path.abspath(__file__))


def build_model(seed: int = 0, stride: int = 1, width: int = 8) -> nn.Module:
    """conv -> relu -> conv -> relu -> pool -> linear; `seed` sets only the weights."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=stride, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 4)).eval()


def example(batch: int = 2, size: int = 16) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))


# A fresh process: import, compile, call once, compare with eager, report.
CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from test_lowering_cache import build_model, example, RTOL, ATOL
import kiln.backend
spec = json.loads(sys.argv[2])
model, x = build_model(spec["seed"]), example()
with torch.no_grad():
    out = torch.compile(model, backend="kiln", options=spec["options"])(x)
    ref = model(x)
s = kiln.backend.stats()
print(json.dumps({"hits": s.lowering_cache_hits, "misses": s.lowering_cache_misses,
                  "partitions": s.partitions, "nodes_in_daemon": s.nodes_in_daemon,
                  "nodes_in_eager": s.nodes_in_eager,
                  "close": torch.allclose(out, ref, rtol=RTOL, atol=ATOL),
                  "max_err": float((out - ref).abs().max())}))
"""


def run_child(seed: int, options: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(kiln.__file__)), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", CHILD, HERE,
                          json.dumps({"seed": seed, "options": options})],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def lowered_dir(daemon_up):
    """The session daemon's lowered/ directory, emptied for this test."""
    path = os.path.join(daemon_up.cache_dir, cache_files.LOWERING_DIR)
    shutil.rmtree(path, ignore_errors=True)
    yield path


def entries(path: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(path) if n.endswith(cache_files.LOWERING_SUFFIX))
    except FileNotFoundError:
        return []


def compile_and_check(model: nn.Module, x: torch.Tensor, **options) -> backend.BackendStats:
    """A fresh Dynamo compile of model in this process, checked against eager;
    the backend's counters for it."""
    torch._dynamo.reset()
    backend.reset_stats()
    with torch.no_grad():
        out = torch.compile(model, backend="kiln", options=options)(x)
        torch.testing.assert_close(out, model(x), rtol=RTOL, atol=ATOL)
    return backend.stats()


def test_second_process_takes_the_lowering_from_disk(lowered_dir):
    first = run_child(seed=11, options={})
    assert (first["hits"], first["misses"]) == (0, 1), first
    assert len(entries(lowered_dir)) == 1
    second = run_child(seed=11, options={})
    assert (second["hits"], second["misses"]) == (1, 0), second
    for r in (first, second):
        assert r["close"], r
    for key in ("partitions", "nodes_in_daemon", "nodes_in_eager"):
        assert first[key] == second[key], (first, second)
    assert second["nodes_in_eager"] == 0


def test_eager_nodes_of_a_cached_graph_still_run(lowered_dir):
    options = {"disabled_ops": ["aten.relu"]}
    first = run_child(seed=12, options=options)
    second = run_child(seed=12, options=options)
    assert (first["misses"], second["hits"]) == (1, 1), (first, second)
    # Two relus in eager, splitting the graph into three partitions; the
    # answer is only eager's if both relus ran.
    assert second["nodes_in_eager"] == first["nodes_in_eager"] >= 2
    assert second["partitions"] == first["partitions"] == 3
    assert first["close"] and second["close"], (first, second)


def _record_splits(model: nn.Module, x: torch.Tensor) -> tuple[list, backend.BackendStats]:
    records: list[backend.GraphRecord] = []
    token = backend.graph_recorder.set(records.append)
    try:
        stats = compile_and_check(model, x)
    finally:
        backend.graph_recorder.reset(token)
    return records, stats


def _describe(gm: torch.fx.GraphModule) -> list:
    """Every node of gm and its fused submodules: name, op, target, args, meta."""
    out = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        metas = [(tuple(v.shape), v.stride(), v.dtype, v.device) if isinstance(v, torch.Tensor)
                 else v for v in vals]
        out.append((node.name, node.op, str(node.target), str(node.args), str(node.kwargs),
                    metas))
        if node.op == "call_module":
            out.append(_describe(getattr(gm, node.target).eager))
    return out


def _summary(report) -> list:
    return [(g.nodes, g.nodes_in_daemon, g.nodes_in_eager, g.eager_reason,
             [(p.name, p.nodes, p.in_daemon) for p in g.partitions],
             [(f.node, f.target, f.reason) for f in g.fallbacks]) for g in report.graphs]


def test_a_hit_rebuilds_the_same_split_graph(lowered_dir, monkeypatch):
    model, x = build_model(13), example()
    cold, cold_stats = _record_splits(model, x)
    warm, warm_stats = _record_splits(model, x)
    assert (cold_stats.lowering_cache_misses, warm_stats.lowering_cache_hits) == (1, 1)
    assert len(cold) == len(warm) == 1
    assert _describe(cold[0].split) == _describe(warm[0].split)
    # kiln.explain reads the same records: it reports the same either way.
    options = {"disabled_ops": ["aten.relu"]}
    with torch.no_grad():
        monkeypatch.setenv(lowering_cache.ENV_SWITCH, "0")
        cold_report = kiln.explain(model, x, **options)
        monkeypatch.delenv(lowering_cache.ENV_SWITCH)
        kiln.explain(model, x, **options)  # stores
        backend.reset_stats()
        warm_report = kiln.explain(model, x, **options)
    assert backend.stats().lowering_cache_hits == 1
    assert _summary(warm_report) == _summary(cold_report)
    assert len(warm_report.graphs[0].fallbacks) == 2


def _stored_entry(lowered_dir: str, model: nn.Module, x: torch.Tensor) -> str:
    compile_and_check(model, x)
    (name,) = entries(lowered_dir)
    return os.path.join(lowered_dir, name)


def _flip_last_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0x5A]))


def _other_version(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", cache_files.LOWERING_FORMAT_VERSION + 1))


def _not_a_pickle(path: str) -> None:
    with open(path, "wb") as f:
        f.write(cache_files.pack_lowering(b"not a pickle", torch.__version__))


def _names_a_global(path: str) -> None:
    # A well-formed entry whose payload would call a function when unpickled.
    with open(path, "wb") as f:
        f.write(cache_files.pack_lowering(pickle.dumps(os.getpid), torch.__version__))


def _wrong_graph(path: str) -> None:
    # Sound container and plain data, but the graph's input has another shape.
    with open(path, "rb") as f:
        data = f.read()
    payload = pickle.loads(cache_files.unpack_lowering(path, data))
    nodes = payload["graphs"][""]
    i = next(i for i, n in enumerate(nodes) if n[0] == "placeholder")
    tag, dtype, shape, stride, device = nodes[i][5]
    nodes[i] = nodes[i][:5] + ((tag, dtype, shape + (1,), stride + (1,), device),)
    with open(path, "wb") as f:
        f.write(cache_files.pack_lowering(pickle.dumps(payload), torch.__version__))


@pytest.mark.parametrize("damage", [
    _flip_last_byte, lambda p: os.truncate(p, os.path.getsize(p) - 10),
    lambda p: os.truncate(p, 20), _other_version, _not_a_pickle, _names_a_global,
    _wrong_graph], ids=["checksum", "truncated", "truncated-header", "other-version",
                        "not-a-pickle", "pickle-global", "wrong-graph"])
def test_a_bad_entry_is_a_miss_and_is_replaced(lowered_dir, damage):
    model, x = build_model(14), example()
    path = _stored_entry(lowered_dir, model, x)
    damage(path)
    stats = compile_and_check(model, x)  # correct: checked against eager
    assert (stats.lowering_cache_hits, stats.lowering_cache_misses) == (0, 1)
    assert cache_files.check_lowering(cache_files.list_lowerings(
        os.path.dirname(lowered_dir))[0]) is None  # written again, whole
    assert compile_and_check(model, x).lowering_cache_hits == 1


def test_model_caching_off_neither_reads_nor_writes(lowered_dir, monkeypatch):
    model, x = build_model(15), example()
    stats = compile_and_check(model, x, model_caching=False)
    assert (stats.lowering_cache_hits, stats.lowering_cache_misses) == (0, 0)
    assert entries(lowered_dir) == []
    monkeypatch.setenv("KILN_MODEL_CACHING", "0")
    compile_and_check(model, x)
    assert entries(lowered_dir) == []
    monkeypatch.delenv("KILN_MODEL_CACHING")
    monkeypatch.setenv(lowering_cache.ENV_SWITCH, "0")
    compile_and_check(model, x)
    assert entries(lowered_dir) == []
    monkeypatch.delenv(lowering_cache.ENV_SWITCH)
    compile_and_check(model, x)  # stored now
    stats = compile_and_check(model, x, model_caching=False)
    assert (stats.lowering_cache_hits, stats.lowering_cache_misses) == (0, 0)


def test_structure_changes_miss_and_weight_changes_hit(lowered_dir):
    x = example()
    assert compile_and_check(build_model(16), x).lowering_cache_misses == 1
    # Another conv stride, another input shape, another option: new graphs.
    assert compile_and_check(build_model(16, stride=2), x).lowering_cache_misses == 1
    assert compile_and_check(build_model(16), example(batch=3)).lowering_cache_misses == 1
    assert compile_and_check(build_model(16), x,
                             min_partition_size=2).lowering_cache_misses == 1
    assert len(entries(lowered_dir)) == 4
    # Other weights, same structure: a hit, and the new weights' answer
    # (compile_and_check compares with this model's eager output).
    stats = compile_and_check(build_model(17), x)
    assert (stats.lowering_cache_hits, stats.lowering_cache_misses) == (1, 0)
    assert len(entries(lowered_dir)) == 4


def test_graphs_calling_user_functions_are_not_cached(lowered_dir):
    @torch.compiler.allow_in_graph
    def scale(t):
        return t * 3

    def fn(t):
        return scale(torch.relu(t)) + 1

    torch._dynamo.reset()
    backend.reset_stats()
    t = torch.randn(8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend="kiln")(t), fn(t))
    stats = backend.stats()
    assert (stats.lowering_cache_hits, stats.lowering_cache_misses) == (0, 0)
    assert entries(lowered_dir) == []


def _cli(capsys, cache_dir: str, *args: str) -> tuple[int, str]:
    code = cli.main(["cache", "--cache-dir", cache_dir, *args])
    return code, capsys.readouterr().out


def test_kiln_cache_commands_cover_lowering_entries(lowered_dir, capsys):
    cache_dir = os.path.dirname(lowered_dir)
    path = _stored_entry(lowered_dir, build_model(18), example())
    size = os.path.getsize(path)
    key = os.path.basename(path)[:16]

    code, out = _cli(capsys, cache_dir, "stats")
    assert code == 0 and f"lowerings:    1 (" in out and f"{size} bytes" in out
    code, out = _cli(capsys, cache_dir, "ls", "--lowerings")
    assert code == 0 and key in out and torch.__version__ in out
    code, out = _cli(capsys, cache_dir, "verify")
    assert code == 0 and "1 lowerings checked, 0 bad" in out

    _flip_last_byte(path)
    code, out = _cli(capsys, cache_dir, "verify")
    assert code == 1 and f"bad     lowering {key}: checksum mismatch" in out
    code, out = _cli(capsys, cache_dir, "verify", "--delete")
    assert code == 0 and f"removed lowering {key}" in out and not os.path.exists(path)

    path = _stored_entry(lowered_dir, build_model(18), example())
    code, out = _cli(capsys, cache_dir, "clear")
    assert code == 0 and ", 1 lowerings" in out
    assert entries(lowered_dir) == [] and cache_files.list_lowerings(cache_dir) == []
