"""Whole-model benchmark: eager, Inductor, OpenVINO, ONNX Runtime and Kiln.

One command runs every model x batch size x backend, each cell in a fresh
child process with a timeout (so a crash, a leak or Dynamo's caches stay in
that cell), and writes results.json, results.md and results.png to --out.

    .venv/bin/python bench/models/run.py --quick
    .venv/bin/python bench/models/run.py                      # everything
    .venv/bin/python bench/models/run.py --models resnet18,bert_base --batch 8
    .venv/bin/python bench/models/run.py --report-only bench/results/latest

Per cell: latency is the median of --runs timed calls after --warmup
calls (fewer, but at least --min-runs, when the timed calls pass
--max-seconds); compile time is the first call including compilation (for
ONNX Runtime: export plus session creation); correctness is max|out - eager|
/ max|eager|, passing at 1e-3.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from importlib import metadata
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import report  # noqa: E402  (needs the path above; no torch import)

ALL_BACKENDS = ("eager", "inductor", "openvino", "onnxruntime", "kiln")
REL_TOLERANCE = 1e-3
QUICK_MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_1", "bert_base")


def _default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --------------------------------------------------------------------------
# Child: one model x batch x backend.

def _time_runs(fn: Any, inputs: tuple, runs: int, min_runs: int,
               max_seconds: float) -> list[float]:
    times: list[float] = []
    start = time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= min_runs and time.perf_counter() - start > max_seconds:
            break
    return times


def run_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs one cell in this process and returns its record (raises on failure)."""
    import torch
    import backends
    import models

    threads = spec["threads"]
    torch.set_num_threads(threads)
    record: dict[str, Any] = {}
    backend = backends.make(spec["backend"], threads)
    try:
        with torch.no_grad():
            workload = models.build(spec["model"], spec["batch"])
            inputs = workload.inputs
            reference = workload.model(*inputs)

            t0 = time.perf_counter()
            fn = backend.prepare(workload.model, inputs, workload.input_names)
            prepared = time.perf_counter()
            out = fn(*inputs)
            first = time.perf_counter()

            record["prepare_s"] = prepared - t0
            record["first_call_s"] = first - t0
            if spec["backend"] == "eager":
                record["compile_s"] = None
            elif backend.compiles_in_prepare:
                record["compile_s"] = prepared - t0
            else:
                record["compile_s"] = first - t0

            if not isinstance(out, torch.Tensor) or out.shape != reference.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise RuntimeError(f"output {got} does not match eager's "
                                   f"{tuple(reference.shape)}")
            abs_err = (out.float() - reference).abs().max().item()
            scale = reference.abs().max().item()
            record["abs_err"] = abs_err
            record["rel_err"] = abs_err / scale if scale > 0 else abs_err
            record["correct"] = bool(record["rel_err"] <= REL_TOLERANCE)

            for _ in range(spec["warmup"]):
                fn(*inputs)
            times = _time_runs(fn, inputs, spec["runs"], spec["min_runs"],
                               spec["max_seconds"])
        record.update(
            status="ok", latency_ms=statistics.median(times), min_ms=min(times),
            max_ms=max(times), runs=len(times), description=workload.description,
            extra=backend.extra())
    except Exception as e:
        note = backend.diagnose()
        if note:  # first, so the cell's one-line error shows it
            raise RuntimeError(f"[{note}] {type(e).__name__}: {e}") from e
        raise
    finally:
        backend.close()
    return record


def child_main(spec_path: str) -> int:
    """Entry point of the child process: spec file in, result file out."""
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        record = run_cell(spec)
    except BaseException as e:  # noqa: BLE001  (any failure becomes an error cell)
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip().splitlines()
        record = {"status": "error", "error": " ".join(message[:3])[:600]}
    with open(spec["result_path"], "w") as f:
        json.dump(record, f)
    return 0


# --------------------------------------------------------------------------
# Parent: schedule cells, aggregate.

def _run_child(spec: dict[str, Any], timeout_s: float, log_path: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cell-") as tmp:
        spec = dict(spec, result_path=os.path.join(tmp, "result.json"))
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        env = dict(os.environ)
        threads = str(spec["threads"])
        # OpenMP pools (torch, Inductor's C++ kernels) sized like everyone else;
        # a fresh Inductor cache per cell keeps its compile time cold, like
        # OpenVINO (model_caching off) and Kiln (private daemon, --no-cache).
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   PYTHONUNBUFFERED="1")
        with open(log_path, "w") as log:
            # A new session: on timeout the whole group (child, compiler
            # workers, a private kilnd) is killed, and nothing else.
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                     "--_cell", spec_path],
                                    stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {"status": "timeout", "error": f"timed out after {timeout_s:.0f} s"}
            finally:
                # Leftovers of a finished child (compile workers) go too.
                # Also on Ctrl-C or SIGTERM of this process (see main).
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            with open(spec["result_path"]) as f:
                return json.load(f)
        except (OSError, ValueError):
            with open(log_path, errors="replace") as f:
                tail = f.read()[-400:].strip().replace("\n", " | ")
            return {"status": "crash",
                    "error": f"child exited with code {proc.returncode}: {tail}"}


def _progress_line(i: int, total: int, cell: dict[str, Any]) -> str:
    head = f"[{i:>3}/{total}] {cell['model']:<20} b{cell['batch']:<2} {cell['backend']:<12}"
    wall = f"({cell['wall_s']:.0f} s)"
    if cell["status"] != "ok":
        return f"{head} {cell['status'].upper()}: {cell.get('error', '')[:160]} {wall}"
    compile_s = cell.get("compile_s")
    parts = [f"{cell['latency_ms']:9.2f} ms median of {cell['runs']}",
             f"compile {compile_s:.1f} s" if compile_s is not None else "",
             f"rel err {cell['rel_err']:.1e} {'ok' if cell['correct'] else 'WRONG'}"]
    extra = cell.get("extra", {})
    if "nodes_in_eager" in extra:
        parts.append(f"nodes daemon/eager {extra['nodes_in_daemon']}/{extra['nodes_in_eager']}")
    if extra.get("exporter"):
        parts.append(f"export {extra['exporter']}")
    if "ov_partitions" in extra:
        parts.append(f"ov partitions {extra['ov_partitions']}, fallbacks {extra['ov_fallbacks']}")
    parts.append(f"load {cell['load'][0]:.1f}")
    return f"{head} " + ", ".join(p for p in parts if p) + f" {wall}"


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("torch", "torchvision", "openvino", "onnxruntime", "onnx", "onnxscript",
                 "transformers", "diffusers", "kiln"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:  # a missing package is a fact, not an error
            out[dist] = "not installed"
    return out


def _environment(threads: int) -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"threads": threads, "cpu": cpu, "cores": os.cpu_count(),
            "platform": platform.platform(), "versions": _versions()}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    import models  # names only; importing it does not build anything
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=None,
                   help=f"comma-separated subset of: {', '.join(models.MODELS)} (default all)")
    p.add_argument("--batch", type=int, nargs="+", default=None,
                   help="batch sizes (default 1 8)")
    p.add_argument("--backends", default=",".join(ALL_BACKENDS),
                   help=f"comma-separated subset of {','.join(ALL_BACKENDS)}")
    p.add_argument("--runs", type=int, default=None, help="timed runs per cell (default 30)")
    p.add_argument("--min-runs", type=int, default=5,
                   help="timed runs even past --max-seconds")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="stop timing a cell after this long (once --min-runs are done)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs after the first call")
    p.add_argument("--threads", type=int, default=_default_threads(),
                   help="threads for every backend (default: the cores this process may use)")
    p.add_argument("--timeout", type=float, default=1200.0,
                   help="seconds before one cell's child process is killed")
    p.add_argument("--out", default=None,
                   help="output directory (default bench/results/<date-time>)")
    p.add_argument("--quick", action="store_true",
                   help=f"{', '.join(QUICK_MODELS)} at batch 1, 20 runs: a few minutes")
    p.add_argument("--report-only", metavar="DIR",
                   help="rewrite results.md/png of DIR from its results.json and exit")
    args = p.parse_args(argv)
    if args.quick:
        args.models = args.models or ",".join(QUICK_MODELS)
        args.batch = args.batch or [1]
        args.runs = args.runs or 20
    args.models = args.models.split(",") if args.models else list(models.MODELS)
    args.batch = args.batch or [1, 8]
    args.runs = args.runs or 30
    args.backends = args.backends.split(",")
    for name in args.models:
        if name not in models.MODELS:
            p.error(f"unknown model {name!r}; valid: {', '.join(models.MODELS)}")
    for name in args.backends:
        if name not in ALL_BACKENDS:
            p.error(f"unknown backend {name!r}; valid: {', '.join(ALL_BACKENDS)}")
    if args.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.out = os.path.join(REPO, "bench", "results", stamp)
    return args


def _write_outputs(out_dir: str, results: dict[str, Any]) -> None:
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report.markdown(results))


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns the exit code (0 even if cells failed)."""
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the running cell's process group is
    # killed and its temporary directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.report_only:
        with open(os.path.join(args.report_only, "results.json")) as f:
            results = json.load(f)
        _write_outputs(args.report_only, results)
        report.chart(results, os.path.join(args.report_only, "results.png"))
        print(report.geomean_text(results))
        return 0

    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    print(f"kiln bench: {len(args.models)} models x batch {args.batch} x "
          f"{len(args.backends)} backends, {args.threads} threads -> {args.out}", flush=True)
    results: dict[str, Any] = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "settings": {k: getattr(args, k) for k in (
            "models", "batch", "backends", "runs", "min_runs", "max_seconds", "warmup",
            "threads", "timeout")} | {"rel_tolerance": REL_TOLERANCE},
        "environment": _environment(args.threads),
        "cells": [],
    }
    print("versions: " + ", ".join(f"{k} {v}" for k, v in
                                   results["environment"]["versions"].items()), flush=True)
    cells = [(b, m, k) for b in args.batch for m in args.models for k in args.backends]
    start = time.perf_counter()
    for i, (batch, model, backend) in enumerate(cells, 1):
        spec = {"model": model, "batch": batch, "backend": backend, "threads": args.threads,
                "runs": args.runs, "min_runs": args.min_runs,
                "max_seconds": args.max_seconds, "warmup": args.warmup}
        log_path = os.path.join(args.out, "logs", f"{model}-b{batch}-{backend}.log")
        # The load average is kept with each cell: other work on the machine
        # (a build, another benchmark) shows up in latencies, and this says when.
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        record = _run_child(spec, args.timeout, log_path)
        cell = {"model": model, "batch": batch, "backend": backend, **record,
                "wall_s": time.perf_counter() - t0,
                "load": [round(load_before, 2), round(os.getloadavg()[0], 2)]}
        results["cells"].append(cell)
        print(_progress_line(i, len(cells), cell), flush=True)
        # Written after every cell, so an interrupted run keeps what it measured.
        _write_outputs(args.out, results)
    results["total_s"] = time.perf_counter() - start
    _write_outputs(args.out, results)
    report.chart(results, os.path.join(args.out, "results.png"))
    latest = os.path.join(os.path.dirname(os.path.abspath(args.out)), "latest")
    if os.path.islink(latest) or not os.path.exists(latest):
        if os.path.islink(latest):
            os.unlink(latest)
        os.symlink(os.path.basename(os.path.abspath(args.out)), latest)
    print(f"\ndone in {results['total_s'] / 60:.1f} min; wrote "
          f"{os.path.join(args.out, 'results.{json,md,png}')}\n")
    print(report.geomean_text(results))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--_cell":
        sys.exit(child_main(sys.argv[2]))
    sys.exit(main())
