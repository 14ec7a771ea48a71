"""bench/models/run.py's suite runs: --resume goes on with a run
interrupted after some models from the first model it did not finish, with
the run's own settings, and refuses to go on where it would measure
something else; --results-file with {isa} keeps one report per kind of host.

The cells are eager only, on two of the TIMM list's smallest models, run
by the real harness in its own child processes.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("timm")

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "bench" / "models" / "run.py"
MODELS = ["lcnet_050", "mnasnet_100"]
sys.path.insert(0, str(RUN.parent))

import host  # noqa: E402  (bench/models/host.py)
from run import MEASURED_PATHS  # noqa: E402


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)


def load(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def save(out: Path, results: dict) -> None:
    (out / "results.json").write_text(json.dumps(results))


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A finished two-model run cut back to what an interruption after its
    first model leaves: the first model's cell, no total time."""
    out = tmp_path_factory.mktemp("suite-run")
    done = run("--suite", "timm", "--models", ",".join(MODELS), "--batch", "1",
               "--backends", "eager", "--runs", "2", "--min-runs", "1", "--warmup", "0",
               "--rounds", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    results = load(out)
    assert [c["model"] for c in results["cells"]] == MODELS
    results["cells"] = results["cells"][:1]
    del results["total_s"]
    save(out, results)
    return out


def uncommitted_changes() -> bool:
    """Whether tracked files differ from HEAD: a run started here records
    "+changes" and cannot be resumed."""
    diff = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                          capture_output=True, text=True)
    return diff.returncode != 0 or bool(diff.stdout.strip())


def test_resume_runs_only_the_models_left_with_the_runs_settings(interrupted, tmp_path):
    if uncommitted_changes():
        pytest.skip("a run on uncommitted changes cannot be resumed; commit first")
    out = tmp_path / "run"
    subprocess.run(["cp", "-r", str(interrupted), str(out)], check=True)
    first = load(out)["cells"][0]
    # Settings on the command line give way to the run's own (runs 2).
    done = run("--resume", str(out), "--runs", "9", "--backends", "inductor")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming: 1 of 2 models done" in done.stdout
    results = load(out)
    assert [c["model"] for c in results["cells"]] == MODELS
    assert [c["backend"] for c in results["cells"]] == ["eager", "eager"]
    assert results["cells"][0] == first
    assert results["cells"][1]["status"] == "ok" and results["cells"][1]["runs"] <= 2
    assert len(results["resumed"]) == 1 and results["total_s"] > 0
    assert "interrupted and resumed at" in (out / "results.md").read_text()


@pytest.mark.parametrize("tamper, why", [
    (lambda r: r["environment"].update(cpu="Another CPU"), "this is"),
    (lambda r: r["environment"].update(commit="0" * 12), "measured files differ"),
    (lambda r: r["environment"].update(commit=r["environment"]["commit"] + "+changes"),
     "uncommitted changes"),
    (lambda r: r["environment"]["versions"].update(torch="0.0"), "versions differ"),
])
def test_resume_refuses_a_run_that_measured_something_else(interrupted, tmp_path, tamper, why):
    if why != "measured files differ" and host.changed_since("HEAD", MEASURED_PATHS):
        pytest.skip("Kiln's own files have uncommitted changes: every resume is refused "
                    "for them first")
    out = tmp_path / "run"
    subprocess.run(["cp", "-r", str(interrupted), str(out)], check=True)
    results = load(out)
    # As if started on a clean tree (changes to tests or docs mark it too),
    # so that the tampered field is the only thing that differs.
    env = results["environment"]
    env["commit"] = env["commit"].removesuffix("+changes")
    tamper(results)
    save(out, results)
    before = (out / "results.json").read_text()
    done = run("--resume", str(out))
    assert done.returncode != 0
    assert why in done.stderr and "start a new run instead" in done.stderr, done.stderr[-2000:]
    assert (out / "results.json").read_text() == before


def test_results_file_is_named_for_the_kind_of_host(interrupted, tmp_path):
    assert host.isa_class(["avx2", "fma"]) == "avx2"
    assert host.isa_class(["avx2", "fma", "avx512f", "avx512_bf16"]) == "avx512"
    cpu, flags = host.cpuinfo()
    done = run("--report-only", str(interrupted),
               "--results-file", str(tmp_path / "RESULTS-timm-{isa}.md"))
    assert done.returncode == 0, done.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.glob("RESULTS-timm-*.md"))
    assert written == [f"RESULTS-timm-{host.isa_class(flags)}.md"]
    text = (tmp_path / written[0]).read_text()
    assert cpu in text and f"| CPU flags | {' '.join(flags)}" in text
