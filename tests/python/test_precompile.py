"""torch's precompile with Kiln: torch.compile(fn, fullgraph=True,
backend="kiln").aot_compile(...) saves with save_compiled_function, and a new
process loads it with torch.compiler.load_compiled_function and gets eager's
answer without Dynamo tracing anything, from the lowering cache and the
daemon's compiled graph (the session daemon's; clients in fresh processes).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, sys, torch
sys.path.insert(0, sys.argv[3])
from cache_clients import CnnSpec, build, ATOL, RTOL
import kiln.backend
from torch._dynamo import symbolic_convert

# Dynamo traces a frame by running an InstructionTranslator over its code.
traced = []
_run = symbolic_convert.InstructionTranslator.run
def counting_run(self, *args, **kwargs):
    traced.append(self.f_code.co_name)
    return _run(self, *args, **kwargs)
symbolic_convert.InstructionTranslator.run = counting_run
spec = CnnSpec(seed=7900, width=16, layers=3, size=12, batch_norm=True)
model, x = build(spec)
x2 = x * 2  # made outside the context, as x was (an inference tensor guards apart)
path = sys.argv[2]


def run(model, x):
    return model(x)


context = torch.inference_mode if sys.argv[4] == "inference_mode" else torch.no_grad
with context():
    if sys.argv[1] == "save":
        compiled = torch.compile(run, fullgraph=True, backend="kiln")
        aot = compiled.aot_compile(((model, x), {}))
        torch.testing.assert_close(aot(model, x), model(x), rtol=RTOL, atol=ATOL)
        aot.save_compiled_function(path)
    else:
        with open(path, "rb") as f:
            fn = torch.compiler.load_compiled_function(f)
        out = fn(model, x)
        torch.testing.assert_close(out, model(x), rtol=RTOL, atol=ATOL)
        # A second call runs what the first built.
        torch.testing.assert_close(fn(model, x2), model(x2), rtol=RTOL, atol=ATOL)
s = kiln.backend.stats()
print(json.dumps({"frames": len(traced), "graphs": s.graphs,
                  "lowering_hits": s.lowering_cache_hits, "partitions": s.partitions,
                  "nodes_in_eager": s.nodes_in_eager}))
"""


def _child(kind: str, path: str, context: str = "no_grad") -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, path, str(HERE), context],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("context", ["no_grad", "inference_mode"])
def test_a_saved_function_loads_in_a_new_process_without_tracing(daemon_up, tmp_path,
                                                                  context):
    path = str(tmp_path / "cnn.aot")
    saved = _child("save", path, context)
    assert saved["frames"] > 0 and saved["partitions"] == 1, saved
    before = daemon_up.stats().graphs_compiled
    loaded = _child("load", path, context)
    # No frame traced; the graph lowered from the lowering cache and
    # compiled by the daemon from its caches.
    assert loaded["frames"] == 0, loaded
    assert (loaded["graphs"], loaded["lowering_hits"], loaded["partitions"]) == (1, 1, 1), loaded
    assert loaded["nodes_in_eager"] == 0, loaded
    assert daemon_up.stats().graphs_compiled == before


def test_a_saved_function_is_refused_under_other_guards(daemon_up, tmp_path):
    """Saved under no_grad: torch's guards refuse a call with grad enabled
    rather than running a graph traced for another mode."""
    path = str(tmp_path / "cnn.aot")
    _child("save", path)
    code = r"""
import sys, torch
sys.path.insert(0, sys.argv[2])
from cache_clients import CnnSpec, build
model, x = build(CnnSpec(seed=7900, width=16, layers=3, size=12, batch_norm=True))
with open(sys.argv[1], "rb") as f:
    fn = torch.compiler.load_compiled_function(f)
try:
    fn(model, x)
except RuntimeError as e:
    print("refused:", str(e)[:200])
"""
    out = subprocess.run([sys.executable, "-c", code, path, str(HERE)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "refused: GuardManager check failed" in out.stdout, out.stdout + out.stderr[-2000:]
