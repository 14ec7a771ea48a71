"""A model's first call in a new process, with every cache Kiln has against
Inductor's: what the second node of a fleet and a container built with a
warm cache pay.

For each model and round, each phase is a fresh Python child that builds
the model, compiles it and calls it once (the first call's time includes
Dynamo, the backend and the run):
  kiln cold        a daemon on an empty cache directory, with the fleet's
                   Redis (a redis-server of this run's own, on loopback)
  kiln local hit   that daemon restarted on the same directory
  kiln remote hit  another daemon on an empty directory, same Redis
  kiln exported    `kiln cache export` of the first directory, `kiln cache
                   import` into an empty one, a daemon there (no Redis)
  kiln precompiled torch's precompile: a process saves
                   torch.compile(run, fullgraph=True, backend="kiln",
                   options={"guard_filter_fn":
                   torch.compiler.keep_portable_guards_unsafe})
                   .aot_compile(...); the timed one loads it
                   (torch.compiler.load_compiled_function: no Dynamo trace)
                   on the first daemon restarted, and calls it
  inductor cold / FX-cache warm   torch.compile(backend="inductor") on an
                   empty TORCHINDUCTOR_CACHE_DIR, then again on it; with
                   freezing (Kiln's usual reference) and without (freezing
                   bypasses Inductor's FX graph cache)
Children first compile a one-op function with backend="eager" (and Kiln's
open their daemon session), so Dynamo's start-up is not charged to the
model; a precompiled function's load is charged to its first call.

    .venv/bin/python bench/cache/fleet_start.py [--models resnet50,bert_base,llama_prefill]
        [--rounds 1] [--results-file bench/cache/RESULTS-fleet-{isa}.md]

Prints one table per run (median first-call seconds over rounds, each
phase's ratio to Kiln's cold, the daemons' compile counters) and keeps
every figure in bench/results/fleet-<date>.json; with --results-file it
writes the table with the host's CPU, flags and FMA peak.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench" / "models"))
sys.path.insert(0, str(REPO / "client"))

import host  # noqa: E402
from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[2])
from models import build
torch.set_num_threads(int(sys.argv[3]))
backend = sys.argv[4]
work = build(sys.argv[1], 1)


def run(model, *inputs):
    return model(*inputs)


with torch.no_grad():
    torch.compile(lambda x: x * 2 + 1, backend="eager")(torch.ones(4))
    if backend.startswith("kiln"):
        from kiln import connection
        from kiln.options import KilnOptions
        opts = KilnOptions.from_mapping({})
        conn = connection.get_connection(opts.socket, opts.autostart, opts.cache_dir)
        conn.connect()
        conn.capabilities()
    else:
        import torch._inductor.config as inductor_config
        inductor_config.freezing = backend == "inductor-freezing"
    if backend == "kiln-save":
        try:
            # Guards on tensors and global state only, as torch documents for
            # portable precompiled functions: transformers' models carry
            # identity guards that cannot be saved at all.
            aot = torch.compile(
                run, fullgraph=True, backend="kiln",
                options={"guard_filter_fn": torch.compiler.keep_portable_guards_unsafe},
            ).aot_compile(((work.model, *work.inputs), {}))
            aot.save_compiled_function(sys.argv[5])
        except Exception as e:
            print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:300]}"}))
            sys.exit(0)
        print(json.dumps({"saved": True}))
        sys.exit(0)
    start = time.perf_counter()
    if backend == "kiln-load":
        with open(sys.argv[5], "rb") as f:
            loaded = torch.compiler.load_compiled_function(f)
        compiled = lambda *inputs: loaded(work.model, *inputs)
    else:
        compiled = torch.compile(work.model,
                                 backend="kiln" if backend == "kiln" else "inductor")
    load_s = time.perf_counter() - start
    out = compiled(*work.inputs)
    first_s = time.perf_counter() - start
    ref = work.model(*work.inputs)
out = out if torch.is_tensor(out) else out[0]
ref = ref if torch.is_tensor(ref) else ref[0]
err = float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
print(json.dumps({"first_s": first_s, "load_s": load_s, "rel_err": err}))
"""

PHASES = ["kiln cold", "kiln local hit", "kiln remote hit", "kiln exported", "kiln precompiled",
          "inductor-freezing cold", "inductor-freezing warm", "inductor cold", "inductor warm"]


def run_child(model: str, threads: int, backend: str, env_extra: dict[str, str],
              path: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO / "client"), **env_extra)
    env.pop("KILN_LOWERING_CACHE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, model, str(REPO / "bench" / "models"),
                          str(threads), backend, path], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{model} {backend} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Redis:
    """A redis-server of this run's own on loopback, nothing persisted."""

    def __init__(self, workdir: str):
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server not found: make setup installs it (deploy/apt-packages.txt)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no", "--dir", workdir],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        deadline = time.monotonic() + 20
        while not self._command(b"PING").startswith(b"+PONG"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit("redis-server did not start")
            time.sleep(0.05)
        self.url = f"redis://127.0.0.1:{self.port}"

    def _command(self, *args: bytes) -> bytes:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=10) as s:
                s.sendall(b"*%d\r\n" % len(args) +
                          b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
                return s.recv(64)
        except OSError:
            return b""

    def flush(self) -> None:
        self._command(b"FLUSHALL")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def kiln_phase(binary: str, threads: int, model: str, cache_dir: str,
               extra: list[str], backend: str = "kiln", path: str = "") -> dict:
    # The last --cache-dir wins: the directory outlives the daemon.
    d = PrivateDaemon(binary, threads, extra_args=["--cache-dir", cache_dir, *extra],
                      prefix="kiln-fleet-")
    try:
        row = run_child(model, threads, backend,
                        {"KILN_SOCKET": d.socket, "KILN_AUTOSTART": "0"}, path)
        if "error" in row or "saved" in row:
            return row
        s = d.stats()
        row["compiled"] = s.graphs_compiled
        row["daemon_compile_s"] = s.compile_seconds
        row["hits"] = {"disk": s.disk_cache_hits, "remote": s.remote_cache_hits}
        return row
    finally:
        d.stop()


def cache_command(*args: str) -> None:
    out = subprocess.run([sys.executable, "-m", "kiln.cli", "cache", *args],
                         env=dict(os.environ, PYTHONPATH=str(REPO / "client")),
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"kiln cache {' '.join(args)} failed:\n{out.stdout}{out.stderr}")


def one_round(binary: str, threads: int, model: str, redis: Redis, work: str) -> dict[str, dict]:
    redis.flush()
    key = os.path.join(work, "fleet.key")
    fleet = ["--remote-cache", redis.url, "--remote-cache-key-file", key]
    dirs = {name: tempfile.mkdtemp(prefix=f"{name}-", dir=work)
            for name in ("first", "second", "imported", "inductor", "inductor-freezing")}
    rows = {}
    try:
        rows["kiln cold"] = kiln_phase(binary, threads, model, dirs["first"], fleet)
        rows["kiln local hit"] = kiln_phase(binary, threads, model, dirs["first"], fleet)
        rows["kiln remote hit"] = kiln_phase(binary, threads, model, dirs["second"], fleet)
        archive = os.path.join(work, "cache.kpak")
        cache_command("--cache-dir", dirs["first"], "export", archive, "--key-file", key)
        cache_command("--cache-dir", dirs["imported"], "import", archive, "--key-file", key)
        os.unlink(archive)
        rows["kiln exported"] = kiln_phase(binary, threads, model, dirs["imported"], [])
        # torch's precompile: saved by one process (not timed), loaded by
        # another on a restarted daemon, with no Dynamo trace.
        saved = os.path.join(work, "model.aot")
        row = kiln_phase(binary, threads, model, dirs["first"], fleet, "kiln-save", saved)
        rows["kiln precompiled"] = (
            row if "error" in row
            else kiln_phase(binary, threads, model, dirs["first"], fleet, "kiln-load", saved))
        if os.path.exists(saved):
            os.unlink(saved)
        for backend in ("inductor-freezing", "inductor"):
            env = {"TORCHINDUCTOR_CACHE_DIR": dirs[backend]}
            rows[f"{backend} cold"] = run_child(model, threads, backend, env)
            rows[f"{backend} warm"] = run_child(model, threads, backend, env)
    finally:
        for path in dirs.values():
            shutil.rmtree(path, ignore_errors=True)
    return rows


def table(results: dict) -> str:
    lines = ["| model | " + " | ".join(PHASES) + " |",
             "|---|" + "--:|" * len(PHASES)]
    notes = []
    for model, rounds in results["models"].items():
        cold = statistics.median(r["kiln cold"]["first_s"] for r in rounds)
        cells = []
        for p in PHASES:
            times = [r[p]["first_s"] for r in rounds if "first_s" in r[p]]
            if not times:
                cells.append("failed")
                notes.append(f"- {model}, {p}: {rounds[0][p].get('error')}")
                continue
            med = statistics.median(times)
            cells.append(f"{med:.2f} s ({med / cold:.2f})")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", *notes]
    kiln_phases = [p for p in PHASES if p.startswith("kiln")]
    lines += ["", "The daemon's own time answering the compile requests of the first call "
              "(its `compile_seconds`; median over the rounds, and in brackets its ratio to the "
              "cold compile):", "",
              "| model | " + " | ".join(kiln_phases) + " |",
              "|---|" + "--:|" * len(kiln_phases)]
    for model, rounds in results["models"].items():
        def daemon_s(p):
            times = [r[p]["daemon_compile_s"] for r in rounds if "daemon_compile_s" in r[p]]
            return statistics.median(times) if times else None
        cold = daemon_s("kiln cold")
        cells = []
        for p in kiln_phases:
            t = daemon_s(p)
            cells.append("-" if t is None or not cold else f"{t * 1000:.0f} ms ({t / cold:.2f})")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Daemon compiles / cache hits (disk, remote) per Kiln phase, first round:")
    lines.append("")
    for model, rounds in results["models"].items():
        first = rounds[0]
        parts = [f"{p}: {first[p]['compiled']} compiled, hits {first[p]['hits']}"
                 for p in PHASES if p.startswith("kiln") and "compiled" in first[p]]
        worst = max(r[p]["rel_err"] for r in rounds for p in PHASES if "rel_err" in r[p])
        lines.append(f"- {model}: " + "; ".join(parts) + f"; largest relative error against "
                     f"eager, any phase: {worst:.1e}")
    return "\n".join(lines)


def report(results: dict) -> str:
    return "\n".join([
        "# First call in a new process, by cache",
        "",
        "Written by `bench/cache/fleet_start.py`; run it again rather than edit this file. "
        "Median first-call time in seconds over the rounds (Dynamo, the backend and the run, "
        "in a fresh process), and in brackets its ratio to Kiln's cold first call.",
        "",
        *host.header_rows(results, "for every backend and daemon"),
        f"| rounds | {results['rounds']} |",
        "",
        table(results),
        "",
    ])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,bert_base,llama_prefill")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--results-file", default=None,
                        help="also write the report here ({isa} becomes avx2 or avx512)")
    args = parser.parse_args()
    binary = find_kilnd()
    began = time.monotonic()
    results = {"command": " ".join([".venv/bin/python", "bench/cache/fleet_start.py",
                                    *sys.argv[1:]]),
               "environment": host.environment(args.threads),
               "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
               "rounds": args.rounds, "models": {}}
    work = tempfile.mkdtemp(prefix="kiln-fleet-bench-", dir="/tmp")
    os.chmod(work, 0o700)
    fd = os.open(os.path.join(work, "fleet.key"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    redis = Redis(work)
    try:
        for model in args.models.split(","):
            results["models"][model] = []
            for r in range(args.rounds):
                rows = one_round(binary, args.threads, model, redis, work)
                results["models"][model].append(rows)
                print(f"{model} round {r + 1}/{args.rounds}: "
                      + ", ".join(f"{p} {rows[p].get('first_s', float('nan')):.2f} s"
                                  for p in PHASES), file=sys.stderr)
    finally:
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["minutes"] = (time.monotonic() - began) / 60
    text = report(results)
    print(text)
    # Every run's figures, as bench/models/run.py keeps its runs (not in git).
    raw = REPO / "bench" / "results" / f"fleet-{datetime.datetime.now():%Y%m%d-%H%M%S}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(results, indent=1))
    print(f"wrote {raw}", file=sys.stderr)
    if args.results_file:
        path = args.results_file.replace(
            "{isa}", host.isa_class(results["environment"]["cpu_flags"]))
        Path(path).write_text(text)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
