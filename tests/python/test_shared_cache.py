"""One compiled-graph cache shared across client processes, daemons and
restarts, and a cache the daemon cannot use: compiles stay correct, each
graph is compiled once per daemon, the directory only ever holds whole
entries, and an unusable directory turns caching off (said once) instead of
failing compiles or killing the daemon.

Clients are separate processes (tests/python/cache_clients.py). Every test
except the first starts its own daemons, so their cache directories are
fresh and their counters start at zero.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import torch

from cache_clients import ATOL, RTOL, CnnSpec, build, run_client
from testing.daemons import Kilnd, find_kilnd, stats
from testing.processes import kill_and_wait, wait_for
from kiln import cache_files, cli, daemon

DISABLED = "compiled-graph cache disabled"


def _counts(socket: str) -> tuple[int, int, int]:
    s = stats(socket)
    return s.graphs_compiled, s.memory_cache_hits, s.disk_cache_hits


def _run_clients(jobs: list[tuple], timeout_s: float = 150) -> list[dict]:
    """Runs compile_and_check(*job) for every job, each in its own process,
    all at once; returns their counters in job order."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=run_client, args=(results, i, *job)) for i, job in enumerate(jobs)]
    for p in procs:
        p.start()
    try:
        out: dict[int, object] = {}
        deadline = time.monotonic() + timeout_s
        while len(out) < len(jobs):
            try:
                i, result = results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"clients not done after {timeout_s} s; have {sorted(out)}")
            if isinstance(result, str):
                pytest.fail(f"client {i} failed:\n{result}")
            out[i] = result
        return [out[i] for i in range(len(jobs))]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()


def _compile_here(socket: str, spec: CnnSpec) -> None:
    """Compiles and checks one model in this process, on the daemon at `socket`."""
    model, x = build(spec)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln", options={"socket": socket, "autostart": False})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    torch._dynamo.reset()


def _files_under(path: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]


def test_clients_compiling_one_model_at_once_compile_it_once(daemon_up):
    # A seed no other test uses: the graph's key is new to the session daemon.
    spec = CnnSpec(seed=7301, width=48, layers=4, size=24)
    n = 4
    ctx = multiprocessing.get_context("spawn")
    # `finish` keeps every client's graph alive until all have compiled, so a
    # late client finds it in memory rather than reloading it from disk.
    start, finish = ctx.Barrier(n), ctx.Barrier(n)
    before = _counts(daemon_up.socket)
    results = _run_clients([(daemon_up.socket, [spec], start, finish) for _ in range(n)])
    after = _counts(daemon_up.socket)
    # The CNN is one Dynamo graph and one daemon partition, in every client.
    assert all(r == {"graphs": 1, "partitions": 1} for r in results), results
    compiled, memory_hits, disk_hits = (a - b for a, b in zip(after, before))
    assert (compiled, memory_hits, disk_hits) == (1, n - 1, 0), daemon_up.log(30)


def test_two_daemons_share_one_directory_under_concurrent_compiles():
    workdirs = [tempfile.mkdtemp(prefix="ks-", dir="/tmp") for _ in range(2)]
    first, second = Kilnd(workdirs[0]), Kilnd(workdirs[1])
    second.cache_dir = first.cache_dir
    cache_dir = first.cache_dir
    specs = [CnnSpec(seed=7400 + i, width=4 + 2 * i, layers=2, size=8) for i in range(6)]
    # Every client its own order, so the daemons race on different keys at
    # different moments: same key at once, and one writing while one reads.
    orders = [specs, specs[::-1], specs[3:] + specs[:3], (specs[3:] + specs[:3])[::-1]]
    try:
        first.start()
        second.start()
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Barrier(len(orders))
        sockets = [first.socket, second.socket] * 2
        results = _run_clients([(s, order, start) for s, order in zip(sockets, orders)])
        graphs = results[0]["partitions"]  # every model is new: distinct graphs
        assert graphs >= len(specs) and all(r["partitions"] == graphs for r in results), results
        for d in (first, second):
            # Two clients' requests each, all answered one way or another.
            assert sum(_counts(d.socket)) == 2 * graphs, (_counts(d.socket), d.log(30))

        assert cli.main(["cache", "--cache-dir", cache_dir, "verify"]) == 0
        assert cache_files.temporaries(cache_dir) == []
        entries = cache_files.list_entries(cache_dir)
        assert len(entries) == graphs, [e.path for e in entries]
        assert all(cache_files.check(e) is None for e in entries)

        first.stop()
        first.start()
        # A new client (this process) on the restarted daemon, whose counters
        # and memory are empty: every graph comes from disk.
        for spec in specs:
            _compile_here(first.socket, spec)
        assert _counts(first.socket) == (0, 0, graphs), first.log(30)
        for d in (first, second):
            assert "rejected" not in open(d.log_file, errors="replace").read(), d.log(30)
    finally:
        first.stop()
        second.stop()
        for w in workdirs:
            shutil.rmtree(w, ignore_errors=True)


def test_cache_dir_that_cannot_be_created_turns_caching_off_once():
    workdir = tempfile.mkdtemp(prefix="ks-", dir="/tmp")
    d = Kilnd(workdir)
    blocker = os.path.join(workdir, "file")
    with open(blocker, "w") as f:
        f.write("a file where the cache's parent directory should be\n")
    d.cache_dir = os.path.join(blocker, "cache")
    try:
        d.start()
        for i in range(3):
            _compile_here(d.socket, CnnSpec(seed=7500 + i, width=6 + i, layers=2, size=8))
        assert _counts(d.socket) == (3, 0, 0)
        log = open(d.log_file, errors="replace").read()
        assert log.count(DISABLED) == 1, log
        assert os.path.isfile(blocker)
    finally:
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


# Well below one entry (the CNN's graph alone is larger), above the lock
# file the daemon writes its pid into.
FILE_SIZE_LIMIT = 1024


def test_full_disk_turns_caching_off_without_killing_the_daemon():
    # As root nothing is read-only, and mounting a small filesystem needs
    # privileges a test should not use; a file-size limit makes every
    # artifact write fail with EFBIG like a full disk fails with ENOSPC.
    # The log goes to a pipe: a log file would be held to the limit too.
    workdir = tempfile.mkdtemp(prefix="ks-", dir="/tmp")
    socket = os.path.join(workdir, "kilnd.sock")
    cache_dir = os.path.join(workdir, "cache")

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))

    proc = subprocess.Popen([find_kilnd(), "--socket", socket, "--cache-dir", cache_dir],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=limit_file_size)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(
        line.decode(errors="replace") for line in proc.stderr), daemon=True)
    reader.start()
    try:
        wait_for(lambda: proc.poll() is not None or daemon.probe(socket, 1.0), 60, "kilnd ready")
        assert proc.poll() is None, f"kilnd exited with {proc.returncode}:\n{''.join(lines)}"
        for i in range(3):
            spec = CnnSpec(seed=7600 + i, width=8 + i, layers=3, size=8)
            try:
                _compile_here(socket, spec)
            finally:
                assert proc.poll() is None, (
                    f"kilnd died ({proc.returncode}) compiling {spec}:\n{''.join(lines)}")
        assert _counts(socket) == (3, 0, 0)
        # The reader thread may still be a line behind the daemon.
        wait_for(lambda: DISABLED in "".join(lines), 60, f"'{DISABLED}' in the log")
        log = "".join(lines)
        assert log.count(DISABLED) == 1, log
        assert "File too large" in log, log
        assert _files_under(os.path.join(cache_dir, "artifacts")) == [], log
    finally:
        if not kill_and_wait(proc.pid, signal.SIGTERM, 10):
            kill_and_wait(proc.pid, signal.SIGKILL, 10)
        proc.wait(timeout=10)
        reader.join(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
