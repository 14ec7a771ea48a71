"""Facts about the host and the code a benchmark run measured: CPU and its
flags, the FMA peak measured by the kernel benchmark, package versions and
the commit. Each run's results carry them (results["environment"]), and
the header of every results file shows them (header_rows). Also what the
per-process benchmarks share: a cell in a child process (run_child) and
where results go (write_results)."""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "torchvision", "openvino", "onnxruntime", "onnx", "onnxscript",
                 "transformers", "diffusers", "kiln"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # a missing package is a fact, not an error
            out[dist] = "not installed"
    return out


def cpuinfo() -> tuple[str, list[str]]:
    """The first CPU's model name and, of report.CPU_FLAGS, those it has."""
    cpu, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    cpu = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return cpu, [f for f in report.CPU_FLAGS if f in flags]


def isa_class(flags: list[str]) -> str:
    """The kind of host a result speaks for: "avx512" when the CPU has
    AVX-512F (Kiln's kernels and oneDNN's choices differ there), else "avx2"."""
    return "avx512" if "avx512f" in flags else "avx2"


def _git(*args: str, repo: str = REPO) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def commit(repo: str = REPO) -> str:
    """HEAD's short hash, with "+changes" when tracked files differ from it."""
    head = _git("rev-parse", "--short=12", "HEAD", repo=repo) or "unknown"
    changed = _git("status", "--porcelain", "--untracked-files=no", repo=repo)
    return head + ("+changes" if changed else "")


def changed_since(rev: str, paths: list[str], repo: str = REPO) -> list[str]:
    """Files under `paths` whose text in the working tree differs from
    `rev`'s (rev "unknown" or not a commit: every path)."""
    if not _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", repo=repo):
        return list(paths)
    out = _git("diff", "--name-only", rev, "--", *paths, repo=repo)
    return out.splitlines() if out else []


def _kernel_bench() -> str:
    build = os.environ.get("KILN_BUILD_DIR") or os.path.join(REPO, "build")
    return os.path.join(build, "bench", "kiln_kernel_bench")


def fma_peak() -> dict[str, Any]:
    """The fp32 FMA peak measured by the kernel benchmark (bench/kernels/
    fma_peak_bench.cc) on one thread and on all: AVX-512 where the CPU has
    it, else AVX2. The reference the whole-model times can be read against."""
    binary = _kernel_bench()
    command = [binary, "--benchmark_filter=^BM_FmaPeak", "--benchmark_format=json"]
    shown = " ".join([os.path.relpath(binary, REPO), *command[1:]])
    if not os.access(binary, os.X_OK):
        return {"error": f"{shown}: not built (make setup builds it)"}
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=300)
        rows = json.loads(out.stdout)["benchmarks"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError) as e:
        return {"command": shown, "error": f"{type(e).__name__}: {e}"}
    peaks: dict[str, dict[int, float]] = {}
    for row in rows:
        if row.get("error_occurred") or row.get("skipped") or "GFLOPS" not in row:
            continue  # BM_FmaPeakAvx512 on a CPU without AVX-512
        isa = "avx512" if "Avx512" in row["name"] else "avx2"
        # The JSON holds the rate in FLOP/s: the counter's "G" is display only.
        peaks.setdefault(isa, {})[int(row.get("threads", 1))] = row["GFLOPS"] / 1e9
    isa = "avx512" if "avx512" in peaks else "avx2"
    if not peaks.get(isa):
        return {"command": shown, "error": f"no FMA peak in its output: {out.stderr[-300:]}"}
    return {"command": shown, "isa": isa,
            "gflops": {str(n): round(g, 1) for n, g in sorted(peaks[isa].items())}}


def environment(threads: int) -> dict[str, Any]:
    cpu, flags = cpuinfo()
    return {"threads": threads, "cpu": cpu, "cores": os.cpu_count(), "cpu_flags": flags,
            "platform": platform.platform(), "commit": commit(),
            "fma_peak": fma_peak(), "versions": versions()}


def header_rows(results: dict[str, Any], threads_note: str = "for every backend") -> list[str]:
    """The table that opens a results file: command, commit, date and run
    time, host, CPU flags, FMA peak, threads. `results` holds command,
    environment (environment()), date and minutes."""
    env = results["environment"]
    peak = env["fma_peak"]
    peak_text = (f"{peak['gflops'].get('1')} GFLOP/s on 1 thread, "
                 f"{peak['gflops'].get(str(env['threads']))} on {env['threads']} "
                 f"({peak['isa']}: `{peak['command']}`)" if "gflops" in peak
                 else peak.get("error", "unknown"))
    return [
        "| | |",
        "|---|---|",
        f"| command | `{results['command']}` |",
        f"| commit | `{env['commit'][:12]}` |",
        f"| date | {results['date']}; took {results['minutes']:.1f} min |",
        f"| host | {env['cpu']}, {env['cores']} cores |",
        f"| CPU flags | {' '.join(env['cpu_flags'])} |",
        f"| fp32 FMA peak | {peak_text} |",
        f"| threads | {env['threads']} {threads_note} |",
    ]


def run_child(script: str, spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs `script --_cell <spec as JSON>` in a process of its own (one
    backend per process) and returns the JSON its last line printed, or a
    failed cell with the end of its output."""
    proc = subprocess.run([sys.executable, script, "--_cell", json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, OMP_NUM_THREADS=str(spec["threads"])))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": "failed", "error": (proc.stderr or proc.stdout)[-500:]}
    return json.loads(lines[-1])


def write_results(name: str, results: dict[str, Any], text: str,
                  results_file: str | None) -> None:
    """Keeps every figure in bench/results/<name>-<date>.json and, with
    `results_file`, the report there ({isa} becomes avx2 or avx512)."""
    raw = Path(REPO) / "bench" / "results" / f"{name}-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1))
    print(f"wrote {raw}", file=sys.stderr)
    if results_file:
        path = results_file.replace("{isa}", isa_class(results["environment"]["cpu_flags"]))
        Path(path).write_text(text)
        print(f"wrote {path}", file=sys.stderr)
