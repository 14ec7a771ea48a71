"""runtime/check_layers.py, the build's layering check, on small trees of
its own: it passes a tree that keeps its layers, and names the file and
line of each upward include, the cycle in the declared dependencies and
the file no layer holds. The real tree is checked by every build."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "runtime" / "check_layers.py"


def run_check(tmp_path: Path, files: dict[str, str], layers: dict[str, list[str]],
              owners: dict[str, str]) -> subprocess.CompletedProcess:
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    manifest = tmp_path / "layers.txt"
    lines = [" ".join(["layer", name, *deps]) for name, deps in layers.items()]
    lines += [f"file {layer} {path}" for path, layer in owners.items()]
    manifest.write_text("\n".join(lines) + "\n")
    return subprocess.run([sys.executable, str(SCRIPT), str(manifest), str(tmp_path),
                           str(tmp_path / "stamp")], capture_output=True, text=True)


BASE = {"runtime/low/a.h": "#pragma once\n",
        "runtime/high/b.cc": '#include "runtime/low/a.h"\n'}
OWNERS = {"runtime/low/a.h": "low", "runtime/high/b.cc": "high"}


def test_a_tree_that_keeps_its_layers_passes(tmp_path):
    result = run_check(tmp_path, BASE, {"low": [], "high": ["low"]}, OWNERS)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "stamp").exists()


def test_an_upward_include_fails_naming_file_and_line(tmp_path):
    files = dict(BASE, **{"runtime/low/a.h": '#pragma once\n#include "runtime/high/b.h"\n',
                          "runtime/high/b.h": "#pragma once\n"})
    owners = dict(OWNERS, **{"runtime/high/b.h": "high"})
    result = run_check(tmp_path, files, {"low": [], "high": ["low"]}, owners)
    assert result.returncode == 1
    assert ("runtime/low/a.h:2: includes runtime/high/b.h: layer 'low' may not include "
            "layer 'high'") in result.stderr
    assert not (tmp_path / "stamp").exists()


def test_a_failure_removes_the_stamp_of_an_earlier_pass(tmp_path):
    assert run_check(tmp_path, BASE, {"low": [], "high": ["low"]}, OWNERS).returncode == 0
    result = run_check(tmp_path, BASE, {"low": [], "high": []}, OWNERS)
    assert result.returncode == 1
    assert not (tmp_path / "stamp").exists()


def test_a_layer_uses_what_its_dependencies_use(tmp_path):
    files = {"runtime/base/c.h": "#pragma once\n",
             "runtime/low/a.h": '#include "runtime/base/c.h"\n',
             "runtime/high/b.cc": '#include "runtime/base/c.h"\n'}
    owners = {"runtime/base/c.h": "base", "runtime/low/a.h": "low", "runtime/high/b.cc": "high"}
    result = run_check(tmp_path, files, {"base": [], "low": ["base"], "high": ["low"]}, owners)
    assert result.returncode == 0, result.stderr


def test_a_dependency_cycle_fails(tmp_path):
    result = run_check(tmp_path, BASE, {"low": ["high"], "high": ["low"]}, OWNERS)
    assert result.returncode == 1
    assert "layer dependencies form a cycle" in result.stderr


def test_a_file_in_no_layer_fails(tmp_path):
    files = dict(BASE, **{"runtime/high/stray.cc": "\n"})
    result = run_check(tmp_path, files, {"low": [], "high": ["low"]}, OWNERS)
    assert result.returncode == 1
    assert "runtime/high/stray.cc: belongs to no layer" in result.stderr
