"""Whole-model benchmark: eager, Inductor, OpenVINO, ONNX Runtime and Kiln.

One command runs every model x batch size x backend, each cell in a fresh
child process with a timeout (so a crash, a leak or Dynamo's caches stay in
that cell), and writes results.json, results.md and results.png to --out.
With --results-file (what `make bench` passes: bench/RESULTS.md) it also
writes that report, and its chart beside it as an SVG: the published
results, which state the host, its CPU flags and measured FMA peak, the
commit and the command.

    .venv/bin/python bench/models/run.py --quick
    .venv/bin/python bench/models/run.py                      # everything
    .venv/bin/python bench/models/run.py --models resnet18,bert_base --batch 8
    .venv/bin/python bench/models/run.py --report-only bench/results/latest
    .venv/bin/python bench/models/run.py --resume bench/results/timm-full
    .venv/bin/python bench/models/run.py --models mobilenet_v2 --dynamo-dict-tags

Per cell: latency is the median of --runs timed calls after --warmup
calls (fewer, but at least --min-runs, when the timed calls pass
--max-seconds); compile time is the first call including compilation (for
ONNX Runtime: export plus session creation); correctness is max|out - eager|
/ max|eager|, passing at 1e-3.

The backends of one model and batch size are timed in lockstep: each
child compiles and warms up in turn (alone on the machine, so compile
times stay clean), then waits; the timed calls are dealt out in --rounds
blocks, one backend at a time, the order turning every round. The
machine's speed drifts by tens of percent over minutes (a shared VM's
memory bandwidth), and a ratio of two cells timed minutes apart carries
that drift; interleaved, both sides see the same spells.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import select
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import host  # noqa: E402  (needs the path above; no torch import)
import report  # noqa: E402

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

class _Control:
    """The child's end of the lockstep protocol (see _run_group): after the
    warm-up it says "ready", then for every "run N T M W" makes untimed
    calls for W seconds (at least one: the other backends' blocks have just
    evicted its weights from the caches and let its threads fall asleep)
    and N timed ones (at least M, fewer once they pass T seconds), replying
    with their times, until "stop"."""

    def __init__(self, cmd_fd: int, reply_fd: int):
        self.cmd = os.fdopen(cmd_fd, "r")
        self.reply = os.fdopen(reply_fd, "w")

    def _say(self, message: dict[str, Any]) -> None:
        self.reply.write(json.dumps(message) + "\n")
        self.reply.flush()

    def serve(self, fn: Any, inputs: tuple) -> list[list[float]]:
        """The timed calls' milliseconds, block by block."""
        self._say({"ready": True})
        blocks: list[list[float]] = []
        for line in self.cmd:
            words = line.split()
            if not words or words[0] == "stop":
                break
            most, seconds, least = int(words[1]), float(words[2]), int(words[3])
            warm_until = time.perf_counter() + float(words[4])
            fn(*inputs)
            while time.perf_counter() < warm_until:
                fn(*inputs)
            block: list[float] = []
            start = time.perf_counter()
            while len(block) < most:
                t0 = time.perf_counter()
                fn(*inputs)
                block.append((time.perf_counter() - t0) * 1e3)
                if len(block) >= least and time.perf_counter() - start > seconds:
                    break
            blocks.append(block)
            self._say({"ms": block})
        return blocks


def run_cell(spec: dict[str, Any], control: _Control) -> dict[str, Any]:
    """Runs one cell in this process and returns its record (raises on
    failure); the timed calls are made when the parent asks (`control`)."""
    import torch
    import backends
    import workloads

    threads = spec["threads"]
    torch.set_num_threads(threads)
    # Every backend that goes through Dynamo alike (ONNX Runtime does not).
    torch._dynamo.config.use_recursive_dict_tags_for_guards = spec["dynamo_dict_tags"]
    record: dict[str, Any] = {}
    backend = backends.make(spec["backend"], threads)
    try:
        with torch.no_grad():
            workload = workloads.build(spec.get("suite", "models"), spec["model"], spec["batch"])
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
            blocks = control.serve(fn, inputs)
            times = [t for block in blocks for t in block]
            if not times:
                raise RuntimeError("no timed calls (the parent stopped the cell)")
            extra = backend.extra()
            # After the timing: what stayed in eager, op by op (Kiln only).
            if extra.get("nodes_in_eager"):
                extra["eager_ops"] = backend.eager_ops(workload.model, inputs)
        record.update(
            status="ok", latency_ms=statistics.median(times), min_ms=min(times),
            max_ms=max(times), runs=len(times), blocks_ms=blocks,
            description=workload.description,
            extra=extra)
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
    control = _Control(spec["cmd_fd"], spec["reply_fd"])
    try:
        record = run_cell(spec, control)
    except BaseException as e:  # noqa: BLE001  (any failure becomes an error cell)
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip().splitlines()
        record = {"status": "error", "error": " ".join(message[:3])[:600]}
    with open(spec["result_path"], "w") as f:
        json.dump(record, f)
    return 0


# --------------------------------------------------------------------------
# Parent: schedule cells, aggregate.

# Seconds of quiet before each block: thread pools that spin after a run
# (ONNX Runtime's, OpenMP's, kilnd's keep-warm of 2 ms) stop first.
SETTLE_S = 0.05
# Seconds of untimed calls at the start of each block. After another
# backend's block a process comes back with cold caches and sleeping
# threads; one call did not undo that for every backend (Kiln's small
# models at batch 1 then had a share of timed calls far above the median
# of a back-to-back loop, where ONNX Runtime's stayed close to its own).
BLOCK_WARMUP_S = 0.2


class _Child:
    """One cell's child process, driven in lockstep (_Control is its end)."""

    def __init__(self, spec: dict[str, Any], log_path: str, tmp: str):
        os.makedirs(tmp)
        cmd_read, self._cmd_write = os.pipe()
        self._reply_read, reply_write = os.pipe()
        self.spec = dict(spec, result_path=os.path.join(tmp, "result.json"),
                         cmd_fd=cmd_read, reply_fd=reply_write)
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(self.spec, f)
        env = dict(os.environ)
        threads = str(spec["threads"])
        # OpenMP pools (torch, Inductor's C++ kernels) sized like everyone else;
        # a fresh Inductor cache per cell keeps its compile time cold, like
        # OpenVINO (model_caching off) and Kiln (private daemon, --no-cache).
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads,
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   PYTHONUNBUFFERED="1")
        if spec.get("baseline"):  # the other checkout's client and kilnd
            env.update(PYTHONPATH=spec["baseline"]["pythonpath"],
                       KILN_DAEMON=spec["baseline"]["kilnd"])
        with open(log_path, "w") as log:
            # A new session: on timeout the whole group (child, compiler
            # workers, a private kilnd) is killed, and nothing else.
            self.proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--_cell", spec_path],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                pass_fds=(cmd_read, reply_write))
        os.close(cmd_read)
        os.close(reply_write)
        self.log_path = log_path
        self.record: dict[str, Any] | None = None  # set once the child is done
        self.runs = 0
        self.wall_s = 0.0
        self._buffer = b""

    def message(self, timeout_s: float) -> dict[str, Any] | None:
        """The child's next message; None once it has exited (or closed its end)."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reply_read], [], [], left)[0]:
                raise TimeoutError
            chunk = os.read(self._reply_read, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, command: str) -> bool:
        try:
            os.write(self._cmd_write, (command + "\n").encode())
            return True
        except BrokenPipeError:
            return False

    def finish(self, timeout_s: float, why: dict[str, Any] | None = None) -> None:
        """Stops the child (or, with `why`, kills it) and takes its record."""
        if why is None:
            self.send("stop")
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                why = {"status": "timeout", "error": f"timed out after {timeout_s:.0f} s"}
        self.kill()
        if why is not None:
            self.record = why
            return
        try:
            with open(self.spec["result_path"]) as f:
                self.record = json.load(f)
        except (OSError, ValueError):
            with open(self.log_path, errors="replace") as f:
                tail = f.read()[-400:].strip().replace("\n", " | ")
            self.record = {"status": "crash",
                           "error": f"child exited with code {self.proc.returncode}: {tail}"}

    def kill(self) -> None:
        # Leftovers of a finished child (compile workers) go too. Also on
        # Ctrl-C or SIGTERM of this process (see main).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        for fd in (self._cmd_write, self._reply_read):
            try:
                os.close(fd)
            except OSError:
                pass
        self._cmd_write = self._reply_read = -1


def _session_rss_bytes(sid: int) -> int:
    """Resident bytes of every process in session `sid` (a child, its
    compile workers, its private kilnd)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid:  # field 6: session id
                continue
            with open(f"/proc/{entry}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            continue
    return total


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _deal_rounds(children: list[_Child], args: argparse.Namespace) -> None:
    """The timed calls of `children`, dealt out in --rounds blocks."""
    timeout = args.timeout
    per_block = -(-args.runs // args.rounds)
    least = -(-args.min_runs // args.rounds)
    seconds = args.max_seconds / args.rounds
    for r in range(args.rounds):
        live = [c for c in children if c.record is None]
        if not live:
            break
        k = r % len(live)
        order = live[k:] + live[:k]
        if r % 2:
            order.reverse()
        for child in order:
            time.sleep(SETTLE_S)
            t0 = time.perf_counter()
            child.send(f"run {per_block} {seconds} {least} {BLOCK_WARMUP_S}")
            try:
                reply = child.message(timeout)
            except TimeoutError:
                child.finish(timeout, {"status": "timeout",
                                       "error": f"timed out after {timeout:.0f} s"})
                reply = None
            if reply is None and child.record is None:
                child.finish(timeout)
            elif reply is not None:
                child.runs += len(reply["ms"])
            child.wall_s += time.perf_counter() - t0


def _run_group(specs: list[dict[str, Any]], log_paths: list[str],
               args: argparse.Namespace) -> list[dict[str, Any]]:
    """The cells of one model and batch size, one per backend, in lockstep
    (see the module docstring); returns their records with wall_s and load.

    A model too large for another process to hold beside the waiting ones
    (the host's available memory below 1.5 times the largest waiting
    cell's resident bytes) is not run in lockstep: the waiting cells take
    their timed calls and exit before the next starts, and the group's
    records say `sequential`."""
    timeout = args.timeout
    with tempfile.TemporaryDirectory(prefix="kiln-bench-cell-") as tmp:
        children: list[_Child] = []
        loads: list[list[float]] = []
        sequential: set[int] = set()
        try:
            for spec, log_path in zip(specs, log_paths):
                waiting = [c for c in children if c.record is None]
                if waiting:
                    largest = max(_session_rss_bytes(c.proc.pid) for c in waiting)
                    if _available_bytes() < 1.5 * largest:
                        _deal_rounds(waiting, args)
                        for child in waiting:
                            if child.record is None:
                                child.finish(timeout)
                            sequential.add(id(child))
                loads.append([round(os.getloadavg()[0], 2)])
                t0 = time.perf_counter()
                child = _Child(spec, log_path, os.path.join(tmp, spec["backend"]))
                children.append(child)
                try:
                    if child.message(timeout) is None:  # failed before its timed calls
                        child.finish(timeout)
                except TimeoutError:
                    child.finish(timeout, {"status": "timeout",
                                           "error": f"timed out after {timeout:.0f} s"})
                child.wall_s = time.perf_counter() - t0
            _deal_rounds(children, args)
            for child in children:
                if child.record is None:
                    child.finish(timeout)
        finally:
            for child in children:
                child.kill()
        for load in loads:
            load.append(round(os.getloadavg()[0], 2))
        records = []
        for c, load in zip(children, loads):
            record = dict(c.record or {"status": "crash", "error": "no record"},
                          wall_s=c.wall_s, load=load)
            if sequential:  # no cell of this group was timed in lockstep
                record["sequential"] = True
            records.append(record)
        return records


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


def _command(argv: list[str]) -> str:
    """This run's command line as one would type it in the repository."""
    def short(path: str) -> str:
        full = os.path.abspath(path)
        return os.path.relpath(full, REPO) if full.startswith(REPO + os.sep) else path
    python = short(sys.executable)
    return shlex.join([python, short(sys.argv[0]), *argv])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    import workloads  # names only; importing it does not build anything
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=workloads.SUITES, default="models",
                   help="the models to run: 'models' (default), the list Kiln is tuned and "
                        "tracked on (bench/models/models.py), or one of PyTorch's CPU "
                        "benchmark suites (bench/suites/)")
    p.add_argument("--models", default=None,
                   help="comma-separated subset of the suite's models (default all; "
                        "for 'models': " + ", ".join(workloads.names("models")) + ")")
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
    p.add_argument("--rounds", type=int, default=5,
                   help="blocks the timed calls of each cell are dealt out in, interleaved "
                        "with the other backends' (see above)")
    p.add_argument("--threads", type=int, default=_default_threads(),
                   help="threads for every backend (default: the cores this process may use)")
    p.add_argument("--timeout", type=float, default=1200.0,
                   help="seconds before one cell's child process is killed")
    p.add_argument("--dynamo-dict-tags", action="store_true",
                   help="set torch._dynamo.config.use_recursive_dict_tags_for_guards in every "
                        "cell (off by default in PyTorch): cheaper guards for the Dynamo "
                        "backends, see bench/README.md")
    p.add_argument("--baseline", metavar="CHECKOUT",
                   help="another checkout of Kiln, built, timed as backend 'baseline' in "
                        "lockstep with this one's: its client package and its kilnd (an A/B "
                        "of two commits, e.g. a `git worktree` of the commit before a change)")
    p.add_argument("--baseline-build", metavar="DIR",
                   help="the baseline's build directory (default CHECKOUT/build)")
    p.add_argument("--out", default=None,
                   help="output directory (default bench/results/<date-time>)")
    p.add_argument("--quick", action="store_true",
                   help=f"{', '.join(QUICK_MODELS)} at batch 1, 20 runs: a few minutes")
    p.add_argument("--report-only", metavar="DIR",
                   help="rewrite results.md/png of DIR (and --results-file) from its "
                        "results.json and exit")
    p.add_argument("--resume", metavar="DIR",
                   help="go on with the interrupted run in DIR, with its settings, from the "
                        "first model it did not finish (a suite longer than one sitting); "
                        "refused unless Kiln, the workloads, the CPU and the versions are "
                        "the ones it ran with")
    p.add_argument("--results-file", metavar="PATH",
                   help="also write the report to PATH and its chart beside it as an SVG "
                        "(`make bench` passes bench/RESULTS.md); {isa} in PATH becomes the "
                        "kind of host the results speak for, avx2 or avx512 (`make "
                        "bench-suites` keeps one file per kind)")
    args = p.parse_args(argv)
    if args.results_file:
        args.results_file = args.results_file.replace(
            "{isa}", host.isa_class(host.cpuinfo()[1]))
    if args.quick:
        args.models = args.models or ",".join(QUICK_MODELS)
        args.batch = args.batch or [1]
        args.runs = args.runs or 20
    suite_models = workloads.names(args.suite)
    args.models = args.models.split(",") if args.models else suite_models
    args.batch = args.batch or [1, 8]
    args.runs = args.runs or 30
    args.backends = args.backends.split(",")
    for name in args.models:
        if name not in suite_models:
            p.error(f"unknown model {name!r} in suite {args.suite}; valid: "
                    f"{', '.join(suite_models)}")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    valid = ALL_BACKENDS + (("baseline",) if args.baseline else ())
    for name in args.backends:
        if name not in valid:
            p.error(f"unknown backend {name!r}; valid: {', '.join(valid)}")
    if args.baseline:
        args.baseline = os.path.abspath(args.baseline)
        args.baseline_build = os.path.abspath(
            args.baseline_build or os.path.join(args.baseline, "build"))
        for need in (os.path.join(args.baseline, "client", "kiln", "__init__.py"),
                     os.path.join(args.baseline_build, "server", "kilnd")):
            if not os.path.exists(need):
                p.error(f"--baseline: {need} is missing (build the checkout first: "
                        f"cmake -S CHECKOUT -B BUILD && cmake --build BUILD "
                        f"--target kilnd kiln_client_native)")
        if "baseline" not in args.backends:
            args.backends.append("baseline")
    if args.out is None:
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        args.out = os.path.join(REPO, "bench", "results", stamp)
    return args


def _baseline_paths(args: argparse.Namespace) -> dict[str, str]:
    """Where the baseline's cell finds its client (first on its path, before
    this checkout's editable install) and its kilnd."""
    return {"pythonpath": os.pathsep.join([os.path.join(args.baseline, "client"),
                                           os.path.join(args.baseline_build, "client")]),
            "client": os.path.join(args.baseline, "client"),
            "kilnd": os.path.join(args.baseline_build, "server", "kilnd")}


# What a resumed run must find unchanged since the commit it started on:
# Kiln itself and the workloads. The driver and the report may change.
MEASURED_PATHS = ["CMakeLists.txt", "proto", "server", "runtime", "cache", "client",
                  "bench/models/backends.py", "bench/models/workloads.py",
                  "bench/models/models.py", "bench/suites/*.py", "bench/suites/*.txt"]


def _resumed(args: argparse.Namespace) -> dict[str, Any]:
    """The results of the run in args.resume, after checking that going on
    measures what it measured; its settings replace the command line's."""
    def refuse(why: str) -> None:
        raise SystemExit(f"--resume {args.resume}: {why}; start a new run instead")

    try:
        with open(os.path.join(args.resume, "results.json")) as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        refuse(f"no readable results.json ({e})")
    env = results["environment"]
    then = env.get("commit", "unknown")
    if then.endswith("+changes"):
        refuse(f"it ran on uncommitted changes to {then.removesuffix('+changes')}")
    changed = host.changed_since(then, MEASURED_PATHS)
    if changed:
        refuse(f"{len(changed)} measured files differ from its commit {then} "
               f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''})")
    cpu, flags = host.cpuinfo()
    if cpu != env.get("cpu") or sorted(flags) != sorted(env.get("cpu_flags", [])) \
            or os.cpu_count() != env.get("cores"):
        refuse(f"it ran on {env.get('cpu')} ({env.get('cores')} cores, "
               f"{' '.join(env.get('cpu_flags', []))}), this is {cpu} "
               f"({os.cpu_count()} cores, {' '.join(flags)})")
    versions = json.loads(json.dumps(host.versions()))
    if versions != env.get("versions"):
        refuse("package versions differ from the ones it ran with")
    for key, value in results["settings"].items():
        if hasattr(args, key):
            setattr(args, key, value)
    args.out = args.resume
    results.setdefault("resumed", []).append(
        datetime.datetime.now().astimezone().isoformat(timespec="seconds"))
    return results


def _write_outputs(out_dir: str, results: dict[str, Any]) -> None:
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report.markdown(results, chart="results.png"))


def _write_charts(out_dir: str, results: dict[str, Any], results_file: str | None) -> None:
    """The run's chart, and with results_file that report and its SVG chart."""
    if not report.can_chart():
        # The reports then go without their chart rather than the run failing at its end.
        print("no charts: matplotlib is not installed (`make bench` installs the "
              "benchmark's requirements, deploy/requirements-bench.txt)")
        with open(os.path.join(out_dir, "results.md"), "w") as f:
            f.write(report.markdown(results))
        if results_file:
            with open(results_file, "w") as f:
                f.write(report.markdown(results))
            print(f"wrote {results_file}")
        return
    report.chart(results, os.path.join(out_dir, "results.png"))
    if results_file:
        chart = os.path.splitext(results_file)[0] + ".svg"
        report.chart(results, chart)
        with open(results_file, "w") as f:
            f.write(report.markdown(results, chart=os.path.basename(chart)))
        print(f"wrote {results_file} and {chart}")


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
        _write_charts(args.report_only, results, args.results_file)
        print(report.geomean_text(results))
        return 0

    results = _resumed(args) if args.resume else None
    os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
    print(f"kiln bench: {len(args.models)} models x batch {args.batch} x "
          f"{len(args.backends)} backends, {args.threads} threads -> {args.out}", flush=True)
    if results is None:
        # The FMA peak is measured first, before any cell loads the machine.
        results = {
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": _command(sys.argv[1:] if argv is None else argv),
            # The make command that ran this one, when it did (Makefile, bench).
            "make_command": os.environ.get("KILN_BENCH_MAKE_COMMAND"),
            "settings": {k: getattr(args, k) for k in (
                "suite", "models", "batch", "backends", "runs", "min_runs", "max_seconds",
                "warmup", "rounds", "threads", "timeout", "dynamo_dict_tags", "quick")}
            | {"rel_tolerance": REL_TOLERANCE},
            "environment": host.environment(args.threads),
            "baseline": ({"checkout": args.baseline, "commit": host.commit(args.baseline)}
                         if args.baseline else None),
            "cells": [],
        }
    print(report.host_text(results), flush=True)
    print("versions: " + ", ".join(f"{k} {v}" for k, v in
                                   results["environment"]["versions"].items()), flush=True)
    groups = [(b, m) for b in args.batch for m in args.models]
    total = len(groups) * len(args.backends)
    finished = {(c["batch"], c["model"]) for c in results["cells"]}
    if finished:
        print(f"resuming: {len(finished)} of {len(groups)} models done", flush=True)
    # Time spent before an interruption (the cells' own time when the run
    # did not record it).
    before_s = results.get("elapsed_s", sum(c.get("wall_s", 0) for c in results["cells"]))
    start = time.perf_counter()
    done = len(results["cells"])
    for batch, model in groups:
        if (batch, model) in finished:
            continue
        specs = [{"model": model, "batch": batch, "backend": backend, "threads": args.threads,
                  "runs": args.runs, "min_runs": args.min_runs,
                  "max_seconds": args.max_seconds, "warmup": args.warmup,
                  "dynamo_dict_tags": args.dynamo_dict_tags, "suite": args.suite,
                  "baseline": _baseline_paths(args) if backend == "baseline" else None}
                 for backend in args.backends]
        log_paths = [os.path.join(args.out, "logs", f"{model}-b{batch}-{backend}.log")
                     for backend in args.backends]
        # The load average is kept with each cell: other work on the machine
        # (a build, another benchmark) shows up in latencies, and this says when.
        for spec, record in zip(specs, _run_group(specs, log_paths, args)):
            cell = {"model": model, "batch": batch, "backend": spec["backend"], **record}
            results["cells"].append(cell)
            done += 1
            print(_progress_line(done, total, cell), flush=True)
        # Written after every model, so an interrupted run keeps what it
        # measured (and --resume goes on from there).
        results["elapsed_s"] = before_s + time.perf_counter() - start
        _write_outputs(args.out, results)
    results["total_s"] = before_s + time.perf_counter() - start
    _write_outputs(args.out, results)
    _write_charts(args.out, results, args.results_file)
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
