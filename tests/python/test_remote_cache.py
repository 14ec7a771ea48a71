"""The fleet's Redis tier (kilnd --remote-cache) with a real redis-server on
loopback: a daemon on another cache directory finds what the first compiled,
compiles nothing and asks its client only for the weights that graph reads; daemons asking for one graph at once compile it once;
values that are not whole, not sealed under the fleet's key or too large
are refused and compiled locally; a Redis that dies costs a warning, once,
and local compiles.

Clients are separate processes (cache_clients.py), as in test_shared_cache.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile

import pytest
import torch

from cache_clients import ATOL, RTOL, CnnSpec, build
from test_shared_cache import _compile_here, _run_clients
from testing.daemons import Kilnd
from testing.processes import wait_for
from testing.redis_server import RedisServer, write_key_file

WARNING = "compiling locally until it answers"


@pytest.fixture
def fleet():
    """A redis-server, a fleet key, and a way to start daemons on both,
    each with a cache directory of its own."""
    work = tempfile.mkdtemp(prefix="kr-", dir="/tmp")
    redis = RedisServer(work)
    redis.start()
    key_file = write_key_file(os.path.join(work, "fleet.key"))
    daemons: list[Kilnd] = []

    def start(*extra: str, key: str = key_file) -> Kilnd:
        d = Kilnd(tempfile.mkdtemp(prefix="kd-", dir=work),
                  ["--remote-cache", redis.url, "--remote-cache-key-file", key, *extra])
        d.start()
        daemons.append(d)
        return d

    start.redis = redis
    start.work = work
    try:
        yield start
    finally:
        for d in daemons:
            d.stop()
        redis.stop()
        shutil.rmtree(work, ignore_errors=True)


SPEC = CnnSpec(seed=7700, width=16, layers=3, size=12, batch_norm=True)


def _published(redis: RedisServer) -> None:
    """Waits for a compiled entry in Redis: daemons publish in the
    background, after answering the compile."""
    wait_for(lambda: bool(redis.keys("kiln:artifact:*")), 60, "an entry published to Redis")


def test_a_daemon_on_another_directory_compiles_nothing_the_fleet_compiled(fleet):
    first = fleet()
    _compile_here(first.socket, SPEC)
    _published(fleet.redis)
    s = first.stats()
    assert s.graphs_compiled == 1 and s.remote_bytes_written > 0, first.log(30)

    second = fleet()
    _compile_here(second.socket, SPEC)
    s = second.stats()
    assert (s.graphs_compiled, s.remote_cache_hits) == (0, 1), second.log(30)
    assert s.remote_hits >= 1 and s.remote_refused == 0 and s.remote_errors == 0
    # Its client uploaded only what the fleet's graph reads as given: the
    # linear layer's weights, not the convolutions' and batch norms' (their
    # folds and packings came from Redis).
    model, _ = build(SPEC)
    weights = sum(t.nbytes for t in model.state_dict().values() if t.is_floating_point())
    linear = model[-1].weight.nbytes + model[-1].bias.nbytes
    assert first.stats().constant_bytes_uploaded == weights
    assert s.constant_bytes_uploaded == linear, (s.constant_bytes_uploaded, linear, weights)
    # Written to its own directory too: after a restart the disk answers.
    second.stop()
    second.start()
    _compile_here(second.socket, SPEC)
    s = second.stats()
    assert (s.graphs_compiled, s.disk_cache_hits, s.remote_cache_hits) == (0, 1, 0), \
        second.log(30)


def test_four_daemons_asking_at_once_compile_once(fleet):
    daemons = [fleet() for _ in range(4)]
    spec = CnnSpec(seed=7710, width=24, layers=4, size=16, batch_norm=True)
    start = multiprocessing.get_context("spawn").Barrier(len(daemons))
    results = _run_clients([(d.socket, [spec], start) for d in daemons])
    assert all(r["partitions"] == 1 for r in results), results
    stats = [d.stats() for d in daemons]
    assert sum(s.graphs_compiled for s in stats) == 1, [d.log(20) for d in daemons]
    assert sum(s.remote_cache_hits for s in stats) == 3
    assert all(s.remote_refused == 0 for s in stats)


def _tamper(redis: RedisServer, how: str) -> None:
    """Changes every artifact the fleet holds as `how` says."""
    keys = redis.keys("kiln:artifact:*")
    assert keys
    for key in keys:
        value = redis.command("GET", key)
        if how == "truncated":
            redis.command("SET", key, value[: len(value) // 2])
        elif how == "corrupted":
            redis.command("SET", key, value[:-1] + bytes([value[-1] ^ 0x5A]))
        elif how == "oversized":
            redis.command("SET", key, value + b"\0" * (2 << 20))
        else:
            raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "corrupted", "oversized", "foreign key"])
def test_values_that_do_not_open_are_refused_and_compiled_locally(fleet, how):
    if how == "foreign key":
        # Sealed by a daemon of another fleet key, under the same names.
        other_key = write_key_file(os.path.join(fleet.work, "other.key"))
        _compile_here(fleet(key=other_key).socket, SPEC)
        _published(fleet.redis)
    else:
        _compile_here(fleet().socket, SPEC)
        _published(fleet.redis)
        _tamper(fleet.redis, how)
    reader = fleet("--remote-cache-max-value-mb", "1")
    _compile_here(reader.socket, SPEC)
    s = reader.stats()
    assert (s.graphs_compiled, s.remote_cache_hits) == (1, 0), reader.log(30)
    assert s.remote_refused >= 1, reader.log(30)
    assert "refused" in reader.log(), reader.log(30)


def test_redis_killed_mid_run_costs_one_warning_and_local_compiles(fleet):
    d = fleet("--remote-cache-timeout-ms", "200")
    _compile_here(d.socket, CnnSpec(seed=7720, width=8, layers=2, size=8))
    fleet.redis.stop()
    for seed in (7721, 7722, 7723):
        _compile_here(d.socket, CnnSpec(seed=seed, width=8, layers=2, size=8))
    s = d.stats()
    assert s.graphs_compiled == 4 and s.remote_errors >= 1, d.log(30)
    assert d.log().count(WARNING) == 1, d.log(30)
    assert d.alive()


def test_a_bad_remote_setting_stops_the_start_with_a_clear_error(fleet):
    loose = os.path.join(fleet.work, "loose.key")
    with open(loose, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(loose, 0o644)
    for args, said in [
        (["--remote-cache", fleet.redis.url], "--remote-cache-key-file"),
        (["--remote-cache", "rediss://127.0.0.1:1", "--remote-cache-key-file", loose], "TLS"),
        (["--remote-cache", "http://x", "--remote-cache-key-file", loose], "redis://"),
        (["--remote-cache", fleet.redis.url, "--remote-cache-key-file", loose], "may be read by others"),
    ]:
        d = Kilnd(tempfile.mkdtemp(prefix="kd-", dir=fleet.work), args)
        d.launch()
        wait_for(lambda: d.proc.poll() is not None, 30, "kilnd to refuse its flags")
        assert d.proc.returncode == 2 and said in d.log(), d.log(10)


class _Fused(torch.nn.Module):
    """Weights concatenated at run time (a fused projection): the daemon
    folds the concatenation into a derived weight (512 KiB at the default
    width), above the size whose read it defers, so a fleet's copy is
    fetched only when first read."""

    def __init__(self, width: int = 256):
        super().__init__()
        torch.manual_seed(7730)
        self.a = torch.nn.Parameter(torch.randn(width, width) / 16)
        self.b = torch.nn.Parameter(torch.randn(width, width) / 16)

    def forward(self, x):
        return torch.relu(x @ torch.cat([self.a, self.b], 0).t())


def _compile_fused(socket: str, width: int = 256) -> None:
    model = _Fused(width).eval()
    x = torch.randn(4, width)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln", options={"socket": socket, "autostart": False})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=RTOL, atol=ATOL)
    torch._dynamo.reset()


def test_large_derived_weights_compile_beside_an_empty_fleet_and_come_from_a_full_one(fleet):
    first = fleet()
    _compile_fused(first.socket)  # nothing in Redis: every derived weight is a miss
    _published(fleet.redis)
    assert first.stats().graphs_compiled == 1, first.log(30)
    second = fleet()
    _compile_fused(second.socket)
    s = second.stats()
    assert (s.graphs_compiled, s.remote_cache_hits) == (0, 1), second.log(30)
    assert s.remote_refused == 0 and s.remote_errors == 0


def test_a_chunked_derived_weight_is_read_whole_and_a_damaged_chunk_is_refused(fleet):
    # 2 x 1280 x 1280 floats: a derived weight of 12.5 MiB, two chunks in
    # Redis (8 MiB each at most).
    width = 1280
    first = fleet()
    _compile_fused(first.socket, width)
    wait_for(lambda: bool(fleet.redis.keys("kiln:derived:*#1")), 60,
             "a chunked derived weight published to Redis")
    assert first.stats().graphs_compiled == 1, first.log(30)

    second = fleet()
    _compile_fused(second.socket, width)
    s = second.stats()
    assert (s.graphs_compiled, s.remote_cache_hits) == (0, 1), second.log(30)
    assert s.remote_refused == 0 and s.remote_bytes_read > 12 << 20, second.log(30)

    for key in fleet.redis.keys("kiln:derived:*#1"):
        value = fleet.redis.command("GET", key)
        fleet.redis.command("SET", key, value[:-1] + bytes([value[-1] ^ 0x5A]))
    third = fleet()
    _compile_fused(third.socket, width)  # eager's answer all the same
    s = third.stats()
    assert s.graphs_compiled == 1 and s.remote_refused >= 1, third.log(30)
    assert "refused" in third.log(), third.log(30)
