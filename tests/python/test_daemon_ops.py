"""Running kilnd: its config file, idle shutdown, the Prometheus endpoint and
JSON logs, each with real daemons on sockets of their own.

A config file is read (flags win over it) and a bad one stops the daemon
with exit code 2 naming the line; /metrics answers on 127.0.0.1 only and
its counters move when a model runs through torch.compile; an idle daemon
exits on its own, never while a session is open; a daemon a client starts
gets --idle-exit-min from the client's options; --log-format json writes
lines json.loads reads.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from testing.daemons import Kilnd, find_kilnd
from testing.processes import alive, free_port, kill_and_wait, wait_for
from kiln import connection, daemon
from kiln.options import KilnOptions
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

# --idle-exit-min of these tests: 3 s.
IDLE_MIN = 0.05
IDLE_S = IDLE_MIN * 60


def _started(tmp_path, *args: str, env: dict[str, str] | None = None) -> Kilnd:
    """A kilnd of this test's own on a socket in its tmp_path, serving."""
    d = Kilnd(tmp_path, args, cache_dir=False, env=env)
    d.start()
    return d


@pytest.fixture
def daemons():
    started: list[Kilnd] = []
    yield started
    for d in started:
        d.stop()


# ---------------------------------------------------------------- config --

def test_config_file_is_read_and_flags_win_over_it(tmp_path, daemons):
    cache = tmp_path / "a cache"  # a space: the file quotes it
    conf = tmp_path / "kilnd.conf"
    conf.write_text(
        "# kilnd settings for this test\n"
        "\n"
        f'cache-dir = "{cache}"\n'
        "cache-max-mb = 123   # MiB\n"
        "threads = 1\n"
        "log-level = 'debug'\n")
    d = _started(tmp_path, "--config", str(conf), "--cache-max-mb", "77")
    daemons.append(d)
    stats = d.stats()
    assert stats.cache_dir == str(cache)
    assert stats.cache_max_bytes == 77 << 20  # the flag, not the file's 123
    log = d.log()
    assert f"settings from {conf}" in log
    assert "(1 threads," in log
    assert " debug " in log  # log-level = 'debug' took effect


def test_config_file_from_the_environment(tmp_path, daemons):
    conf = tmp_path / "env.conf"
    conf.write_text("no-cache = true\n")
    d = _started(tmp_path, "--cache-dir", str(tmp_path / "c"),
               env={"KILN_CONFIG_FILE": str(conf)})
    daemons.append(d)
    # The file (named by KILN_CONFIG_FILE) turns the cache off, but a flag
    # wins over the file.
    assert d.stats().cache_dir == str(tmp_path / "c")
    d.stop()
    d2 = _started(tmp_path, env={"KILN_CONFIG_FILE": str(conf), "KILN_CACHE_DIR": str(tmp_path)})
    daemons.append(d2)
    assert d2.stats().cache_dir == ""  # the file over the environment


@pytest.mark.parametrize("text, line, fragment", [
    ("threads = 2\n\ncache-max-mbs = 1\n", 3, "unknown key 'cache-max-mbs'"),
    ("# ok\nlog-level = 'loud'\n", 2, "--log-level takes one of"),
    ("metrics-port = 70000\n", 1, "--metrics-port takes a TCP port"),
    ("threads 2\n", 1, "text values are quoted"),
    ("log-level = info\n", 1, "text values are quoted"),
    ("[daemon]\nthreads = 2\n", 1, "'daemon' is a table"),
    ("config = 'other.conf'\n", 1, "can only be given on the command line"),
])
def test_bad_config_file_exits_2_naming_file_and_line(tmp_path, text, line, fragment):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"),
                           "--config", str(conf)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert f"{conf}:{line}:" in proc.stderr
    assert fragment in proc.stderr
    assert not os.path.exists(tmp_path / "s.sock")


def test_missing_config_file_exits_2(tmp_path):
    proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"),
                           "--config", str(tmp_path / "nope.conf")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "nope.conf" in proc.stderr


# --------------------------------------------------------------- metrics --

def _scrape(port: int, method: str = "GET", path: str = "/metrics"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$')


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        out[match.group(1)] = float(match.group(2))
    return out


def _listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} has them) listening on port."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, hex_port = fields[1].split(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # LISTEN
                found.append(address)
    return found


def test_metrics_endpoint_counts_a_real_torch_compile_run(tmp_path, daemons):
    port = free_port()
    d = _started(tmp_path, "--no-cache", "--metrics-port", str(port))
    daemons.append(d)
    assert f"metrics on http://127.0.0.1:{port}/metrics" in d.log()
    # Bound to 127.0.0.1 and nothing else.
    assert _listening_addresses(port) == ["0100007F"]

    status, headers, body = _scrape(port)
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    before = _samples(body)
    for name in ("kiln_compiles_total", 'kiln_cache_hits_total{level="memory"}',
                 'kiln_cache_hits_total{level="disk"}', "kiln_cache_misses_total",
                 "kiln_executes_total", "kiln_execute_errors_total",
                 "kiln_execute_seconds_count", "kiln_execute_seconds_sum",
                 'kiln_execute_seconds_bucket{le="5e-05"}', 'kiln_execute_seconds_bucket{le="10"}',
                 'kiln_execute_seconds_bucket{le="+Inf"}', "kiln_compile_seconds_count",
                 "kiln_constant_bytes", "kiln_packed_weight_bytes", "kiln_plan_bytes",
                 "kiln_resident_bytes", "kiln_clients", "kiln_live_graphs",
                 "kiln_uptime_seconds"):
        assert name in before, name
    for family, kind in (("kiln_executes_total", "counter"),
                         ("kiln_execute_seconds", "histogram"), ("kiln_clients", "gauge")):
        assert f"# TYPE {family} {kind}\n" in body
        assert f"# HELP {family} " in body

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": d.socket, "autostart": False,
                                      "fallback": "error"})
    runs = 5
    try:
        with torch.no_grad():
            for _ in range(runs):
                x = torch.randn(4, 16)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        after = _samples(_scrape(port)[2])
        assert after["kiln_clients"] >= 1
        assert after["kiln_live_graphs"] >= 1
        # The compiled graph holds its weights packed; the uploaded
        # originals went once packed (no run reads them).
        assert after["kiln_packed_weight_bytes"] > 0
    finally:
        torch._dynamo.reset()
        connection.get_connection(d.socket, False).close()

    assert after["kiln_compiles_total"] >= before["kiln_compiles_total"] + 1
    assert after["kiln_cache_misses_total"] == after["kiln_compiles_total"]
    assert after["kiln_compile_seconds_count"] >= before["kiln_compile_seconds_count"] + 1
    assert after["kiln_executes_total"] >= before["kiln_executes_total"] + runs
    assert after["kiln_execute_errors_total"] == 0
    # Every input was copied into the arena (none is an earlier call's output).
    copied = 'kiln_input_bytes_total{where="copied"}'
    assert after[copied] >= before[copied] + runs * 4 * 16 * 4
    assert after['kiln_input_bytes_total{where="in_place"}'] == 0
    executes = after["kiln_execute_seconds_count"] - before["kiln_execute_seconds_count"]
    assert executes >= runs
    assert after["kiln_execute_seconds_count"] == after["kiln_executes_total"]
    assert after['kiln_execute_seconds_bucket{le="+Inf"}'] == after["kiln_execute_seconds_count"]
    assert after["kiln_execute_seconds_sum"] > 0
    buckets = [v for k, v in after.items() if k.startswith("kiln_execute_seconds_bucket")]
    assert buckets == sorted(buckets)  # cumulative
    assert after["kiln_uptime_seconds"] >= before["kiln_uptime_seconds"]
    # The same numbers GetStats reports.
    stats = d.stats()
    assert stats.executes == after["kiln_executes_total"]
    assert stats.graphs_compiled == after["kiln_compiles_total"]


def test_metrics_endpoint_answers_only_get_metrics(tmp_path, daemons):
    port = free_port()
    d = _started(tmp_path, "--no-cache", "--metrics-port", str(port))
    daemons.append(d)
    assert _scrape(port, path="/")[0] == 404
    assert _scrape(port, path="/metrics/x")[0] == 404
    status, headers, _ = _scrape(port, method="POST")
    assert status == 405
    assert headers["Allow"] == "GET, HEAD"
    status, _, body = _scrape(port, method="HEAD")
    assert (status, body) == (200, "")
    # Garbage and a silent connection: answered or dropped, and the
    # endpoint (and the daemon) keep serving.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"\x00\x01garbage\r\n\r\n")
        assert s.recv(64).startswith(b"HTTP/1.1 400")
    silent = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        assert _scrape(port)[0] == 200
        assert daemon.probe(d.socket)
    finally:
        silent.close()


def test_taken_metrics_port_fails_the_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"), "--no-cache",
                               "--metrics-port", str(port)],
                              capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"127.0.0.1:{port}" in proc.stderr
    assert not os.path.exists(tmp_path / "s.sock")
    assert not os.path.exists(tmp_path / "s.sock.lock")


# ------------------------------------------------------------------ idle --

def _wait_exit(d: Kilnd, timeout_s: float) -> float:
    """Waits for d to exit on its own; returns when (monotonic)."""
    wait_for(lambda: d.proc.poll() is not None, timeout_s, "kilnd to exit on its own")
    return time.monotonic()


def test_idle_daemon_exits_cleanly_after_the_configured_time(tmp_path, daemons):
    started = time.monotonic()  # the idle clock starts after this, before "ready"
    d = _started(tmp_path, "--no-cache", "--idle-exit-min", str(IDLE_MIN))
    daemons.append(d)
    exited = _wait_exit(d, IDLE_S + 60)
    assert d.proc.returncode == 0
    assert exited - started >= IDLE_S
    assert not os.path.exists(d.socket)
    assert not os.path.exists(d.socket + ".lock")
    log = d.log()
    assert len(re.findall(r"no client session or call for 3s \(--idle-exit-min 0.05\): "
                          r"shutting down", log)) == 1, log
    assert "kilnd stopped" in log


def test_idle_exit_waits_while_a_session_is_open(tmp_path, daemons):
    d = _started(tmp_path, "--no-cache", "--idle-exit-min", str(IDLE_MIN))
    daemons.append(d)
    channel, stub = d.stub()
    try:
        session = stub.OpenSession(kiln_pb2.OpenSessionRequest(pid=os.getpid(),
                                                               client_name="idle-test"),
                                   timeout=5).session_id
        time.sleep(IDLE_S + 2)
        assert d.proc.poll() is None, d.log()  # a session is open: stays
        # Scrapes and stats are not use: they do not keep it up, but
        # neither does their absence bring it down while the session is open.
        assert d.stats().sessions == 1
        closing = time.monotonic()  # the daemon restarts its idle clock after this
        stub.CloseSession(kiln_pb2.CloseSessionRequest(session_id=session), timeout=5)
    finally:
        channel.close()
    exited = _wait_exit(d, IDLE_S + 60)
    assert d.proc.returncode == 0
    assert exited - closing >= IDLE_S  # counted from the session's close


def test_without_the_flag_the_daemon_stays(tmp_path, daemons):
    d = _started(tmp_path, "--no-cache")
    daemons.append(d)
    time.sleep(2)
    assert d.proc.poll() is None
    assert "exits after" not in d.log()


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode().split("\0")[:-1]


def test_autostarted_daemon_gets_idle_exit_min_from_the_options(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON", find_kilnd())
    socket_path = str(tmp_path / "auto" / "kilnd.sock")
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": socket_path, "daemon_idle_min": IDLE_MIN,
                                      "cache_dir": str(tmp_path / "cache"),
                                      "fallback": "error"})
    try:
        x = torch.randn(2, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
        # The connection the backend opened (and with it the daemon).
        conn = connection.get_connection(socket_path, True)
        pid = conn.stats().pid
        cmd = _cmdline(pid)
        assert cmd[cmd.index("--idle-exit-min") + 1] == "0.05"
        # Up while this client's session is open.
        time.sleep(IDLE_S + 1)
        assert daemon.probe(socket_path)
    finally:
        torch._dynamo.reset()
        connection.get_connection(socket_path, True).close()
    # Gone once nobody uses it.
    try:
        # (alive reaps it: the daemon is this process's child.)
        wait_for(lambda: not alive(pid), IDLE_S + 60, "idle exit")
    finally:
        kill_and_wait(pid, signal.SIGTERM)
    assert "shutting down" in open(daemon.log_path_for(socket_path)).read()


def test_autostart_passes_the_default_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DAEMON", find_kilnd())
    assert KilnOptions.from_mapping(None).daemon_idle_min == 10
    monkeypatch.setenv("KILN_DAEMON_IDLE_MIN", "0")
    assert KilnOptions.from_mapping(None).daemon_idle_min == 0
    for idle, expected in ((10.0, "10"), (0.0, "0")):
        socket_path = str(tmp_path / f"d{expected}" / "kilnd.sock")
        daemon.ensure_daemon(socket_path, cache_dir=str(tmp_path / "cache"), idle_min=idle)
        channel = daemon.open_channel(socket_path)
        pid = kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=5).pid
        channel.close()
        try:
            cmd = _cmdline(pid)
            assert cmd[cmd.index("--idle-exit-min") + 1] == expected
        finally:
            kill_and_wait(pid, signal.SIGTERM)
    # Without idle_min (kiln start, a daemon started by hand): no flag.
    socket_path = str(tmp_path / "plain" / "kilnd.sock")
    daemon.ensure_daemon(socket_path, cache_dir=str(tmp_path / "cache"))
    channel = daemon.open_channel(socket_path)
    pid = kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=5).pid
    channel.close()
    try:
        assert "--idle-exit-min" not in _cmdline(pid)
    finally:
        kill_and_wait(pid, signal.SIGTERM)


def test_autostart_waits_for_a_daemon_letting_go_of_the_lock(tmp_path, monkeypatch):
    """A daemon that is shutting down (idle) no longer answers but holds the
    socket's lock for a moment; a client starting another one then waits
    instead of failing on its exit code 3."""
    import fcntl
    import threading

    monkeypatch.setenv("KILN_DAEMON", find_kilnd())
    socket_dir = tmp_path / "held"
    socket_dir.mkdir(mode=0o700)
    socket_path = str(socket_dir / "kilnd.sock")
    lock = open(socket_path + ".lock", "a+")
    fcntl.flock(lock, fcntl.LOCK_EX)  # as the departing daemon does
    log_path = Path(daemon.log_path_for(socket_path))

    def refused_once() -> bool:
        return log_path.exists() and "another kilnd holds" in log_path.read_text()

    def let_go():  # once a first attempt has been turned away, however long that took
        try:
            wait_for(refused_once, 30, "a kilnd refused by the held lock")
        finally:
            lock.close()

    letting_go = threading.Thread(target=let_go)
    letting_go.start()
    daemon.ensure_daemon(socket_path, cache_dir=str(tmp_path / "cache"), timeout_s=40)
    letting_go.join()
    channel = daemon.open_channel(socket_path)
    pid = kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=5).pid
    channel.close()
    kill_and_wait(pid, signal.SIGTERM)
    assert refused_once()  # what the first attempts said



def test_autostart_gives_up_on_a_lock_that_stays_held(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setenv("KILN_DAEMON", find_kilnd())
    socket_dir = tmp_path / "held"
    socket_dir.mkdir(mode=0o700)
    socket_path = str(socket_dir / "kilnd.sock")
    with open(socket_path + ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.monotonic()
        with pytest.raises(daemon.DaemonError, match="exited with code 3"):
            daemon.ensure_daemon(socket_path, cache_dir=str(tmp_path / "cache"), timeout_s=5)
        assert time.monotonic() - start < 20
    # No attempt was still starting when it gave up, to take the socket now.
    time.sleep(1)
    assert not daemon.probe(socket_path)


# ------------------------------------------------------------------ logs --

def _json_lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        record = json.loads(line)  # every line, no exceptions
        assert set(record) == {"time", "level", "pid", "logger", "msg"}, record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
        records.append(record)
    return records


@pytest.mark.parametrize("how", ["flag", "env"])
def test_json_logs_parse_line_by_line(tmp_path, daemons, how):
    log_file = tmp_path / "kilnd.json.log"
    args = ["--no-cache", "--log-file", str(log_file)]
    env = {}
    if how == "flag":
        args += ["--log-format", "json"]
    else:
        env["KILN_LOG_FORMAT"] = "json"
    d = _started(tmp_path, *args, env=env)
    daemons.append(d)
    # A client name that needs escaping ends up in a log message.
    nasty = 'say "hi"\\ \n\ttab \x01 ünï'
    channel, stub = d.stub()
    try:
        session = stub.OpenSession(kiln_pb2.OpenSessionRequest(pid=os.getpid(),
                                                               client_name=nasty),
                                   timeout=5).session_id
        stub.CloseSession(kiln_pb2.CloseSessionRequest(session_id=session), timeout=5)
    finally:
        channel.close()
    d.stop()
    assert d.proc.returncode == 0
    records = _json_lines(log_file.read_text(encoding="utf-8"))
    assert {r["pid"] for r in records} == {d.proc.pid}
    assert {r["logger"] for r in records} == {"kilnd"}
    assert {r["level"] for r in records} <= {"trace", "debug", "info", "warning", "error",
                                             "critical"}
    messages = [r["msg"] for r in records]
    assert any(m.startswith("kilnd ") and " ready on " in m for m in messages)
    assert any(nasty in m for m in messages), messages
    assert messages[-1] == "kilnd stopped"


def test_bad_log_format_exits_2(tmp_path):
    for args, env in ((["--log-format", "xml"], {}), ([], {"KILN_LOG_FORMAT": "yaml"})):
        proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"), *args],
                              capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, **env))
        assert proc.returncode == 2
        assert "json" in proc.stderr
