"""One adapter per backend of the whole-model benchmark.

An adapter turns a model and its example inputs into a callable that runs
the model (`prepare`), and may report extra facts about what it did
(`extra`). Adapters run inside the per-cell child process of run.py, so a
failing import, export or compile only fails that cell. Every adapter gets
the same thread count and runs under torch.no_grad.

Compile time is measured by the caller as prepare() plus the first call,
except where an adapter compiles eagerly in prepare (ONNX Runtime: export
plus session creation), which it says with `compiles_in_prepare`.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any, Callable

import torch
from torch import nn

Runner = Callable[..., torch.Tensor]


class Backend:
    """Base adapter: eager PyTorch."""
    name = "eager"
    compiles_in_prepare = False

    def __init__(self, threads: int):
        self.threads = threads

    def prepare(self, model: nn.Module, inputs: tuple[torch.Tensor, ...],
                input_names: tuple[str, ...]) -> Runner:
        return model

    def extra(self) -> dict[str, Any]:
        """Backend-specific facts for the results (after the runs)."""
        return {}

    def eager_ops(self, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict[str, int]:
        """{"<op>: <why>": nodes} of what this backend left in eager; {} when
        it does not say (only Kiln does). Called after extra(): it may
        compile again."""
        return {}

    def diagnose(self) -> str:
        """After a failure: anything the backend knows that the error may not say."""
        return ""

    def close(self) -> None:
        """Release what prepare() started (processes, temp files)."""


class Eager(Backend):
    name = "eager"


class Inductor(Backend):
    """TorchInductor with freezing: weights become constants, so it can fold
    and prepack them like the other inference compilers do."""
    name = "inductor"

    def prepare(self, model, inputs, input_names):
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        return torch.compile(model, backend="inductor")


class _Collect(logging.Handler):
    """Keeps the messages of a logger, to report what a backend did."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class OpenVINO(Backend):
    """OpenVINO's own torch.compile backend on its CPU plugin.

    Uses its documented `aot_autograd` option: the default path re-traces
    each graph with make_fx in fake mode inside Dynamo's compile, which on
    torch 2.14 leaves symbols without sources in Dynamo's shape environment
    and fails every model with "sources must not be empty for symbol sN".
    Under no_grad, AOTAutograd hands it the inference graph with weights
    turned into constants, which is what we want to measure anyway.

    The backend silently falls back (a whole graph to Inductor, a partition
    to eager PyTorch) and only says so in debug logs; those are collected
    and reported, so a cell that did not run on OpenVINO is visible.
    """
    name = "openvino"

    def __init__(self, threads: int):
        super().__init__(threads)
        self._log = _Collect()

    def prepare(self, model, inputs, input_names):
        import openvino.torch  # noqa: F401  (registers backend="openvino")
        for name in ("backend", "execute", "compile"):
            logger = logging.getLogger(f"openvino.frontend.pytorch.torchdynamo.{name}")
            logger.setLevel(logging.DEBUG)
            logger.addHandler(self._log)
        # f32 pinned: on CPUs with bf16 support the plugin may otherwise pick
        # bf16, which is faster but not the same computation. LATENCY means
        # one stream using all INFERENCE_NUM_THREADS for one request.
        config = {
            "INFERENCE_NUM_THREADS": str(self.threads),
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_PRECISION_HINT": "f32",
        }
        options = {"device": "CPU", "config": config, "model_caching": False,
                   "aot_autograd": True}
        return torch.compile(model, backend="openvino", options=options)

    def extra(self):
        msgs = self._log.messages
        compiled = sum("compile successful" in m for m in msgs)
        fallbacks = [m for m in msgs if "Failed in OpenVINO" in m or "Falling back" in m]
        out: dict[str, Any] = {"ov_partitions": compiled, "ov_fallbacks": len(fallbacks)}
        if fallbacks:
            out["ov_fallback_messages"] = [m[:300] for m in fallbacks[:5]]
        return out


class OnnxRuntime(Backend):
    """torch.onnx.export to a temp file, then an ORT CPU session."""
    name = "onnxruntime"
    compiles_in_prepare = True

    def __init__(self, threads: int):
        super().__init__(threads)
        self._dir = tempfile.mkdtemp(prefix="kiln-bench-onnx-")
        self.exporter = ""
        self.export_errors: list[str] = []

    def _export(self, model, inputs, input_names, path: str) -> None:
        # The TorchScript exporter (dynamo=False) handles more of these models;
        # the dynamo exporter is the fallback.
        errors = []
        for dynamo in (False, True):
            try:
                torch.onnx.export(model, inputs, path, input_names=list(input_names),
                                  output_names=["output"], dynamo=dynamo,
                                  opset_version=18 if dynamo else 17,
                                  **({"external_data": False} if dynamo else {}))
                self.exporter = "dynamo" if dynamo else "torchscript"
                self.export_errors = errors
                return
            except Exception as e:  # noqa: BLE001  (any exporter failure -> next one)
                # The first line names the problem; the rest is often a graph dump.
                first = (str(e).strip().splitlines() or [""])[0]
                errors.append(f"dynamo={dynamo}: {type(e).__name__}: {first[:300]}")
        raise RuntimeError("torch.onnx.export failed: " + " | ".join(errors))

    def prepare(self, model, inputs, input_names):
        import onnxruntime as ort
        path = os.path.join(self._dir, "model.onnx")
        self._export(model, inputs, input_names, path)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        # Exporters may drop inputs the graph does not use; feed what it asks for.
        wanted = [i.name for i in session.get_inputs()]
        positions = {n: k for k, n in enumerate(input_names)}
        feeds = [(n, positions[n]) for n in wanted]

        def run(*args: torch.Tensor) -> torch.Tensor:
            out = session.run(None, {n: args[k].numpy() for n, k in feeds})
            return torch.from_numpy(out[0])
        return run

    def extra(self):
        out: dict[str, Any] = {"exporter": self.exporter}
        if self.export_errors:  # why the first exporter was not used
            out["export_errors"] = self.export_errors
        return out

    def close(self):
        shutil.rmtree(self._dir, ignore_errors=True)


class Kiln(Backend):
    """Kiln, against a private daemon started for this cell.

    A private daemon (own socket, --threads, no disk cache) keeps the
    measurement away from whatever else uses the shared daemon, makes its
    thread count follow --threads, and makes compile time cold like the
    others': no cached graphs and no weights uploaded by an earlier cell.
    """
    name = "kiln"

    def __init__(self, threads: int):
        super().__init__(threads)
        self._dir = tempfile.mkdtemp(prefix="kiln-bench-d-")
        self._daemon: subprocess.Popen | None = None

    def _start_daemon(self) -> None:
        from kiln import daemon
        sock = os.path.join(self._dir, "kilnd.sock")
        log = open(os.path.join(self._dir, "kilnd.log"), "ab")
        # Same process group as this child: the parent's timeout kill of the
        # group takes the daemon with it.
        self._daemon = subprocess.Popen(
            [daemon.find_daemon_binary(), "--socket", sock, "--threads", str(self.threads),
             "--no-cache", "--log-level", "warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not daemon.probe(sock):
            if self._daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kilnd did not start (exit {self._daemon.poll()}); "
                                   f"log: {self.daemon_log()[-500:]}")
            time.sleep(0.05)
        os.environ["KILN_SOCKET"] = sock
        os.environ["KILN_AUTOSTART"] = "0"
        # The client's lowering cache lives in the cache directory: a fresh
        # one, so that compile time is cold for the client's part as well.
        os.environ["KILN_CACHE_DIR"] = self._dir

    def diagnose(self) -> str:
        # A daemon that crashed shows up in the client only as "no daemon
        # answers"; its exit status (a negative signal number) says more.
        if self._daemon is not None and self._daemon.poll() is not None:
            return f"kilnd exited with code {self._daemon.returncode}"
        return ""

    def daemon_log(self) -> str:
        try:
            with open(os.path.join(self._dir, "kilnd.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def prepare(self, model, inputs, input_names):
        self._start_daemon()
        import kiln.backend
        kiln.backend.reset_stats()
        return torch.compile(model, backend="kiln")

    def eager_ops(self, model, inputs):
        import kiln
        # kiln.explain compiles the model again from a reset Dynamo (the
        # daemon still holds its graphs) and gives every eager node its reason.
        report = kiln.explain(model, *inputs)
        ops: dict[str, int] = {}
        for graph in report.graphs:
            if graph.eager_reason:
                key = f"(whole graph): {graph.eager_reason}"
                ops[key] = ops.get(key, 0) + graph.nodes
            for f in graph.fallbacks:
                key = f"{f.target}: {f.reason}"
                ops[key] = ops.get(key, 0) + 1
        return dict(sorted(ops.items(), key=lambda kv: -kv[1]))

    def extra(self):
        import kiln.backend
        s = kiln.backend.stats()
        return {"nodes_in_daemon": s.nodes_in_daemon, "nodes_in_eager": s.nodes_in_eager,
                "graphs": s.graphs, "partitions": s.partitions,
                "fallback_partitions": s.fallback_partitions}

    def close(self):
        log = self.daemon_log()
        if log:  # into the cell's log, for diagnosis; the directory goes below
            print(f"--- kilnd log (last 4000 chars) ---\n{log[-4000:]}", flush=True)
        if self._daemon is not None and self._daemon.poll() is None:
            self._daemon.send_signal(signal.SIGTERM)
            try:
                self._daemon.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._daemon.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


class Baseline(Kiln):
    """Kiln of another checkout (run.py --baseline): the cell's process has
    that checkout's client first on its path and KILN_DAEMON naming its
    kilnd, so this adapter's code is the same and what it drives is not."""
    name = "baseline"

    def prepare(self, model, inputs, input_names):
        import kiln
        client = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
        if not client or not os.path.abspath(kiln.__file__).startswith(client + os.sep):
            raise RuntimeError(f"the baseline cell imported kiln from {kiln.__file__}, "
                               f"not from the baseline's client {client!r}")
        return super().prepare(model, inputs, input_names)


BACKENDS: dict[str, type[Backend]] = {
    b.name: b for b in (Eager, Inductor, OpenVINO, OnnxRuntime, Kiln, Baseline)}


def make(name: str, threads: int) -> Backend:
    """The adapter called `name` (KeyError names the valid ones)."""
    if name not in BACKENDS:
        raise KeyError(f"unknown backend {name!r}; valid: {', '.join(BACKENDS)}")
    return BACKENDS[name](threads)

