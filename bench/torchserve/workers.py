"""What TorchServe users gain from Kiln: N workers of one model under a real
TorchServe, with each worker compiling through kilnd, against eager and
Inductor workers.

    .venv/bin/python bench/torchserve/workers.py                     # resnet50, 4 workers
    .venv/bin/python bench/torchserve/workers.py --model resnet18 --backends kiln,eager

For each backend, from cold (a fresh kilnd with an empty cache directory, a
fresh Inductor cache directory), it archives the model with
torch-model-archiver (bench_model.py, bench_handler.py: KilnHandler with the
compile step chosen per backend; every worker compiles and runs one warm-up
input in initialize), starts TorchServe, and sends requests from
`--clients` threads from the moment it starts. It reports:

- time to first response per worker: from TorchServe's start to the first
  answer that worker gave (answers carry the worker's pid);
- the daemon's compiles and cache hits, and its packed weights;
- resident memory once every worker has answered and `--requests` more
  requests were served, and again after `--settle` seconds of one request
  a second: RSS and PSS summed over TorchServe's frontend, its workers and
  (for Kiln) the daemon. PSS splits pages shared between
  processes (torch's libraries, mapped by every worker) among them, so its
  sum counts each page once; RSS sums count shared pages once per process;
- steady-state requests per second and the median request latency;
- the largest difference of any answer from the eager model's, relative to
  the output's scale.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import psutil  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

from private_daemon import PrivateDaemon, find_kilnd  # noqa: E402
from torchserve_server import TorchServe, venv_bin  # noqa: E402

MODEL_NAME = "bench"


def archive(work: Path, model: str, backend: str, workers: int, shape: list[int]) -> Path:
    store = work / "store"
    store.mkdir(parents=True)
    config = work / "model-config.yaml"
    config.write_text(
        f"minWorkers: {workers}\nmaxWorkers: {workers}\nbatchSize: 1\n"
        "responseTimeout: 1200\nstartupTimeout: 1200\n"
        f"bench:\n  model: {model}\n  backend: {backend}\n"
        f"kiln:\n  dynamic: false\n  warmup:\n    - shape: {shape}\n")
    torch.manual_seed(0)
    weights = work / "weights.pt"
    net = getattr(torchvision.models, model)().eval()
    # bench_model.BenchModel holds the network as `net`.
    torch.save({f"net.{k}": v for k, v in net.state_dict().items()}, weights)
    subprocess.run(
        [os.path.join(venv_bin(), "torch-model-archiver"), "--model-name", MODEL_NAME,
         "--version", "1.0", "--model-file", str(HERE / "bench_model.py"),
         "--serialized-file", str(weights), "--handler", str(HERE / "bench_handler.py"),
         "--config-file", str(config), "--export-path", str(store)],
        check=True, capture_output=True, timeout=600)
    weights.unlink()
    return store


def memory(pids: list[int]) -> dict[str, int]:
    rss = pss = 0
    for pid in pids:
        try:
            info = psutil.Process(pid).memory_full_info()
        except psutil.Error:
            continue
        rss += info.rss
        pss += info.pss
    return {"rss": rss, "pss": pss}


def run_backend(backend: str, args: argparse.Namespace, x: torch.Tensor,
                reference: torch.Tensor) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"kiln-ts-{backend}-", dir="/tmp"))
    env = dict(os.environ)
    daemon = None
    try:
        store = archive(work, args.model, backend, args.workers, list(x.shape))
        if backend == "kiln":
            daemon = PrivateDaemon(find_kilnd())
            env.update(KILN_SOCKET=daemon.socket, KILN_AUTOSTART="0")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
        server = TorchServe(work, store, f"{MODEL_NAME}={MODEL_NAME}.mar", env)
        body = json.dumps(x.tolist()).encode()
        first: dict[int, float] = {}
        answers: list[tuple[float, float, int, list]] = []  # (end since start, latency, pid, output)
        lock = threading.Lock()
        stop = threading.Event()
        deadline = time.monotonic() + args.timeout

        def client() -> None:
            while not stop.is_set() and time.monotonic() < deadline:
                t0 = time.monotonic()
                try:
                    status, out = server.predict(MODEL_NAME, body, timeout=args.timeout)
                except (urllib.error.URLError, ConnectionError, OSError):
                    time.sleep(0.1)  # not listening yet
                    continue
                if status != 200:
                    time.sleep(0.1)  # no worker ready yet
                    continue
                t1 = time.monotonic()
                answer = json.loads(out)
                with lock:
                    since = t1 - server.started_at
                    first.setdefault(answer["pid"], since)
                    answers.append((since, t1 - t0, answer["pid"], answer["output"]))
                    if len(first) >= args.workers and len(answers) >= args.workers + args.requests:
                        stop.set()

        server.start()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        ready_s = server.wait_ready(MODEL_NAME, args.workers, args.timeout)
        for t in threads:
            t.join()
        if len(first) < args.workers:
            raise RuntimeError(f"{backend}: only {len(first)} workers answered:\n{server.log_tail()}")
        pids = server.pids() + ([daemon.proc.pid] if daemon else [])
        mem = memory(pids)
        daemon_mem = memory([daemon.proc.pid]) if daemon else {"rss": 0, "pss": 0}
        # Then a server in use for a while: one request a second for
        # --settle seconds (past the daemon's 60 s grace for uploaded
        # weights its graphs no longer read), and memory again.
        settle_end = time.monotonic() + args.settle
        while time.monotonic() < settle_end:
            status, out = server.predict(MODEL_NAME, body, timeout=args.timeout)
            if status == 200:
                answer = json.loads(out)
                answers.append((time.monotonic() - server.started_at, 0.0, answer["pid"],
                                answer["output"]))
            time.sleep(1.0)
        settled = memory(pids)
        daemon_settled = memory([daemon.proc.pid]) if daemon else {"rss": 0, "pss": 0}
        # Steady state: the answers after every worker had answered once.
        all_first = max(first.values())
        steady = [a for a in answers if a[0] > all_first and a[1] > 0]
        window = (steady[-1][0] - steady[0][0]) if len(steady) > 1 else float("nan")
        scale = reference.abs().max().item()
        worst = max((torch.tensor(a[3]) - reference).abs().max().item() for a in answers) / scale
        result = {
            "backend": backend,
            "ready_s": ready_s,
            "first_response_s": sorted(first.values()),
            "rss_mib": mem["rss"] / 2**20,
            "pss_mib": mem["pss"] / 2**20,
            "daemon_rss_mib": daemon_mem["rss"] / 2**20,
            "settled_rss_mib": settled["rss"] / 2**20,
            "settled_pss_mib": settled["pss"] / 2**20,
            "settled_daemon_rss_mib": daemon_settled["rss"] / 2**20,
            "requests_per_s": (len(steady) - 1) / window if len(steady) > 1 else float("nan"),
            "median_latency_ms": statistics.median(a[1] for a in steady) * 1e3 if steady else None,
            "answers": len(answers),
            "max_rel_diff": worst,
        }
        if daemon:
            s = daemon.stats()
            result.update(compiles=s.graphs_compiled,
                          cache_hits=s.memory_cache_hits + s.disk_cache_hits,
                          packed_weight_mib=s.packed_weight_bytes / 2**20,
                          sessions=s.sessions)
        server.stop()
        return result
    finally:
        if daemon:
            if args.keep:
                shutil.copy(daemon.log_path, work / "kilnd.log")
            daemon.stop()
        if args.keep:
            print(f"[{backend}] kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision classifier (random weights)")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--backends", default="kiln,eager,inductor")
    ap.add_argument("--clients", type=int, default=4, help="threads sending requests")
    ap.add_argument("--requests", type=int, default=40,
                    help="requests served after every worker answered once")
    ap.add_argument("--settle", type=float, default=70,
                    help="seconds of one request a second before measuring memory again")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--keep", action="store_true",
                    help="keep each backend's directory (TorchServe's logs, the daemon's log)")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = getattr(torchvision.models, args.model)().eval()
    weight_mib = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    x = torch.randn(1, 3, args.size, args.size)
    with torch.no_grad():
        reference = model(x)
    del model

    results = []
    for backend in args.backends.split(","):
        print(f"[{backend}] starting TorchServe with {args.workers} workers of {args.model}",
              file=sys.stderr, flush=True)
        results.append(run_backend(backend, args, x, reference))

    print(f"\n{args.model}: {weight_mib:.1f} MiB of weights; {args.workers} TorchServe workers; "
          f"{os.cpu_count()} cores; every worker runs one warm-up input in initialize()\n")
    print("| backend | workers ready (s) | first response per worker (s) | compiles "
          "| PSS sum (MiB) | RSS sum (MiB) | daemon RSS (MiB) "
          f"| after {args.settle:.0f} s: PSS sum | RSS sum | daemon RSS | req/s | median ms "
          "| max rel diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        firsts = ", ".join(f"{t:.1f}" for t in r["first_response_s"])
        compiles = (f"{r['compiles']} in the daemon (+{r['cache_hits']} hits)" if "compiles" in r
                    else f"{args.workers} (one per worker)" if r["backend"] != "eager" else "-")
        print(f"| {r['backend']} | {r['ready_s']:.1f} | {firsts} | {compiles} "
              f"| {r['pss_mib']:.0f} | {r['rss_mib']:.0f} | {r['daemon_rss_mib']:.0f} "
              f"| {r['settled_pss_mib']:.0f} | {r['settled_rss_mib']:.0f} "
              f"| {r['settled_daemon_rss_mib']:.0f} "
              f"| {r['requests_per_s']:.1f} | {r['median_latency_ms']:.1f} | {r['max_rel_diff']:.1e} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"model": args.model, "weight_mib": weight_mib, "workers": args.workers,
             "results": results}, indent=2))


if __name__ == "__main__":
    main()
