"""Weights saved in the cache directory: after a daemon restart, compiling a
model again uploads none of its weights and derives none of the folded and
packed ones (all read from the cache directory), and answers as eager; a
damaged saved weight is dropped, uploaded again and the answer is still
right; with model caching off nothing is saved.

Clients are separate processes (tests/python/cache_clients.py), each a
fresh Python with a fresh Dynamo, as after a restart of the user's program.
"""
from __future__ import annotations

import glob
import multiprocessing
import os
import shutil
import tempfile

import pytest

from cache_clients import CnnSpec, run_client
from testing.daemons import Kilnd, stats
from kiln import cli

SPEC = CnnSpec(seed=8100, width=24, layers=3, size=12, batch_norm=True)
# conv weights and biases, batch-norm parameters and statistics, linear
WEIGHT_BYTES = 4 * (3 * 24 * 9 + 2 * 24 * 24 * 9 + 3 * 24 + 3 * 4 * 24
                    + 24 * 12 * 12 * 10 + 10)


def _compile_in_child(socket: str, spec: CnnSpec, env: dict[str, str] | None = None) -> dict:
    """compile_and_check in a fresh process (raises there on a wrong answer)."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        proc = ctx.Process(target=run_client, args=(results, 0, socket, [spec]))
        proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        _, result = results.get(timeout=150)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    if isinstance(result, str):
        pytest.fail(f"client failed:\n{result}")
    return result


def _constant_files(cache_dir: str) -> list[str]:
    return glob.glob(os.path.join(cache_dir, "constants", "*", "*.kcst"))


@pytest.fixture
def private_kilnd():
    workdir = tempfile.mkdtemp(prefix="kp-", dir="/tmp")
    d = Kilnd(workdir)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def test_restart_uploads_and_derives_nothing_saved_before(private_kilnd):
    d = private_kilnd
    d.start()
    _compile_in_child(d.socket, SPEC)
    cold = stats(d.socket)
    assert cold.graphs_compiled >= 1 and cold.constant_bytes_uploaded >= WEIGHT_BYTES
    d.stop()  # SIGTERM: the daemon finishes its queued writes before exiting
    # Uploaded weights, the batch-norm folds and the packed weights.
    assert len(_constant_files(d.cache_dir)) >= 3 * SPEC.layers, d.log(30)

    d.start()
    _compile_in_child(d.socket, SPEC)  # checks the answer against eager
    warm = stats(d.socket)
    assert warm.graphs_compiled == 0 and warm.disk_cache_hits >= 1, d.log(30)
    assert warm.constant_bytes_uploaded == 0, d.log(30)
    # Every weight once as uploaded, the folded and packed conv weights again.
    assert warm.constant_bytes_from_cache >= WEIGHT_BYTES, warm
    assert "rejected" not in open(d.log_file, errors="replace").read()


def test_damaged_saved_weights_are_uploaded_again(private_kilnd):
    d = private_kilnd
    d.start()
    _compile_in_child(d.socket, SPEC)
    d.stop()
    files = _constant_files(d.cache_dir)
    assert files
    for path in files:  # one payload byte each, past the 4096-byte header
        with open(path, "r+b") as f:
            f.seek(4096)
            byte = f.read(1)
            f.seek(4096)
            f.write(bytes([byte[0] ^ 0xFF]))

    d.start()
    _compile_in_child(d.socket, SPEC)  # still the eager answer
    s = stats(d.socket)
    assert s.constant_bytes_uploaded >= WEIGHT_BYTES, d.log(30)
    log = open(d.log_file, errors="replace").read()
    # A client's weight is checked against its hash, a derived one its MAC.
    assert "rejected (content does not match its hash)" in log
    assert "rejected (no valid MAC)" in log


def test_model_caching_off_saves_no_weights(private_kilnd):
    d = private_kilnd
    d.start()
    _compile_in_child(d.socket, SPEC, env={"KILN_MODEL_CACHING": "0"})
    d.stop()
    assert _constant_files(d.cache_dir) == []


def test_kiln_cache_counts_verifies_and_clears_saved_weights(private_kilnd, capsys):
    d = private_kilnd
    d.start()
    _compile_in_child(d.socket, SPEC)
    d.stop()
    saved = _constant_files(d.cache_dir)
    assert saved
    capsys.readouterr()
    assert cli.main(["cache", "--cache-dir", d.cache_dir, "stats"]) == 0
    assert f"constants:    {len(saved)} " in capsys.readouterr().out
    assert cli.main(["cache", "--cache-dir", d.cache_dir, "verify"]) == 0
    with open(saved[0], "r+b") as f:  # cut into the payload
        f.truncate(4096 + 8)
    assert cli.main(["cache", "--cache-dir", d.cache_dir, "verify"]) == 1
    assert "truncated or oversized payload" in capsys.readouterr().out
    assert cli.main(["cache", "--cache-dir", d.cache_dir, "clear"]) == 0
    assert f"and {len(saved)} constants" in capsys.readouterr().out
    assert _constant_files(d.cache_dir) == []
