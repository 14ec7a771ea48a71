"""A real TorchServe on private ports, for tests/python/test_torchserve.py and
bench/torchserve/workers.py.

Each instance has its own working directory, model store, TMPDIR (TorchServe
keeps its pid file and its workers' sockets in the temporary directory, so
two instances sharing one would find each other) and free local ports.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from testing.processes import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "torchserve"


def venv_bin() -> str:
    return os.path.dirname(sys.executable)


def make_archive(store: Path, env: dict[str, str] | None = None) -> Path:
    """The example archive, built by the example's own script."""
    env = dict(env or os.environ)
    env["PATH"] = venv_bin() + os.pathsep + env.get("PATH", "")
    subprocess.run(["bash", str(EXAMPLE / "make_archive.sh"), str(store)], check=True,
                   env=env, capture_output=True, timeout=300)
    return store / "smallnet.mar"


class TorchServe:
    """`torchserve --foreground` serving the archives in `store`."""

    def __init__(self, workdir: Path, store: Path, models: str, env: dict[str, str] | None = None):
        self.workdir = workdir
        self.store = store
        self.models = models
        self.env = dict(env or os.environ)
        self.ports = {k: free_port() for k in ("inference", "management", "metrics")}
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def url(self, api: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[api]}/{path.lstrip('/')}"

    def start(self) -> None:
        tmp = self.workdir / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.properties"
        config.write_text(
            "".join(f"{api}_address=http://127.0.0.1:{port}\n" for api, port in self.ports.items())
            + "disable_token_authorization=true\n"
            + "enable_envvars_config=false\n")
        env = dict(self.env)
        env.update(TMPDIR=str(tmp), TEMP=str(tmp), LOG_LOCATION=str(self.workdir / "logs"),
                   METRICS_LOCATION=str(self.workdir / "logs"))
        env["PATH"] = venv_bin() + os.pathsep + env.get("PATH", "")
        self.started_at = time.monotonic()
        with open(self.workdir / "torchserve.out", "ab") as out:
            self.proc = subprocess.Popen(
                [os.path.join(venv_bin(), "torchserve"), "--start", "--foreground", "--ncs",
                 "--disable-token-auth", "--model-store", str(self.store),
                 "--models", self.models, "--ts-config", str(config)],
                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)

    def get_json(self, api: str, path: str, timeout: float = 10) -> object:
        with urllib.request.urlopen(self.url(api, path), timeout=timeout) as r:
            return json.loads(r.read())

    def workers(self, model: str) -> list[dict]:
        try:
            return self.get_json("management", f"models/{model}")[0]["workers"]
        except (urllib.error.URLError, ConnectionError, OSError, KeyError, IndexError):
            return []

    def wait_ready(self, model: str, workers: int, timeout_s: float = 300) -> float:
        """Seconds from start() until `workers` workers are READY."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"torchserve exited with {self.proc.returncode}:\n{self.log_tail()}")
            failed = self.failed_load()
            if failed:
                raise RuntimeError(f"{model}: a worker failed to load it ({failed}):\n"
                                   f"{self.log_tail()}")
            ready = [w for w in self.workers(model) if w.get("status") == "READY"]
            if len(ready) >= workers:
                return time.monotonic() - self.started_at
            time.sleep(0.2)
        raise TimeoutError(f"{model}: fewer than {workers} workers ready after {timeout_s:.0f} s:\n"
                           f"{self.log_tail()}")

    def failed_load(self) -> str | None:
        """TorchServe's message if a worker failed to load a model (it would
        retry forever)."""
        try:
            text = (self.workdir / "logs" / "model_log.log").read_text(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if "Failed to load model" in line:
                return line.split("MODEL_LOG - ", 1)[-1]
        return None

    def predict(self, model: str, body: bytes, content_type: str = "application/json",
                timeout: float = 120) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url("inference", f"predictions/{model}"), data=body,
                                     headers={"Content-Type": content_type}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def pids(self) -> list[int]:
        """The frontend's and every worker's pid."""
        import psutil
        if self.proc is None or self.proc.poll() is not None:
            return []
        root = psutil.Process(self.proc.pid)
        return [root.pid] + [p.pid for p in root.children(recursive=True)]

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for name in ("torchserve.out", "logs/model_log.log"):
            try:
                out += (self.workdir / name).read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                pass
        return "\n".join(out)

    def stop(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        # Workers are in the frontend's session: make sure none outlives it.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
