"""Who may talk to kilnd, and how it goes down: a real daemon per test.

TCP needs the daemon's token (and speaks TLS when given certificates);
a socket passed by a service manager is served; shared-memory objects of
dead clients are removed when the daemon starts; SIGTERM lets in-flight
calls finish, refuses new ones and removes the socket and its lock.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
import pytest
import torch
import torch.nn as nn

from testing.call_gate import CallGate
from testing.daemons import Kilnd, find_kilnd
from testing.processes import can_unshare_pid, free_port, kill_and_wait, wait_for
from kiln import connection, daemon
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

TOKEN = "kiln-test-token-0123456789"


def private_daemon(tmp_path, *args: str, **options) -> Kilnd:
    """A kilnd of this test's own without a cache, launched; each test
    says when it is ready (testing.daemons.Kilnd: options)."""
    d = Kilnd(tmp_path, ["--no-cache", *args], cache_dir=False, **options)
    d.launch()
    return d


def _stats_over(channel, metadata=()):
    return kiln_pb2_grpc.KilnStub(channel).GetStats(kiln_pb2.StatsRequest(), timeout=5,
                                                     metadata=metadata)


def _compiled_matches_eager(socket_path: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": socket_path, "autostart": False,
                                      "fallback": "error"})
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return str(path)


def test_tcp_calls_need_the_token(tmp_path, token_file, monkeypatch):
    port = free_port()
    d = private_daemon(tmp_path, "--tcp", f"127.0.0.1:{port}", "--token-file", token_file)
    try:
        d.wait_ready(lambda: daemon.probe(d.socket, 1.0))
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        for metadata in ((), (("authorization", "Bearer wrong-token-0000000000"),)):
            with pytest.raises(grpc.RpcError) as info:
                _stats_over(channel, metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "token" in info.value.details()
        assert _stats_over(channel, (("authorization", f"Bearer {TOKEN}"),)).pid == d.proc.pid
        channel.close()
        # The backend over TCP (tensors still through shared memory: same host).
        monkeypatch.setenv("KILN_TOKEN", TOKEN)
        _compiled_matches_eager(f"tcp:127.0.0.1:{port}")
        # The CLI sends it too.
        status = subprocess.run(
            [sys.executable, "-m", "kiln.cli", "--socket", f"tcp:127.0.0.1:{port}", "status"],
            capture_output=True, text=True, timeout=60, env={**os.environ, "KILN_TOKEN": TOKEN})
        assert status.returncode == 0, status.stderr
        assert f"(pid {d.proc.pid})" in status.stdout
        monkeypatch.setenv("KILN_TOKEN", "wrong-token-0000000000")
        with pytest.raises(daemon.DaemonError, match="KILN_TOKEN"):
            daemon.ensure_daemon(f"tcp:127.0.0.1:{port}", autostart=True)
    finally:
        d.stop()


def test_killed_tcp_client_is_released_when_its_hold_call_ends(tmp_path, token_file):
    # Nothing vouches for the pid a TCP client claims, so the daemon does
    # not watch it: the client keeps a Hold call open (with the token), and
    # its death ends it.
    port = free_port()
    d = private_daemon(tmp_path, "--tcp", f"127.0.0.1:{port}", "--token-file", token_file)
    code = (
        "import time, torch, torch.nn as nn\n"
        "m = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()\n"
        "c = torch.compile(m, backend='kiln', options={'fallback': 'error'})\n"
        "x = torch.randn(2, 8)\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")
    env = dict(os.environ, KILN_SOCKET=f"tcp:127.0.0.1:{port}", KILN_TOKEN=TOKEN)
    channel = grpc.insecure_channel(daemon.target_for(d.socket))
    try:
        d.wait_ready(lambda: daemon.probe(d.socket, 1.0))
        client = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "ready", client.stderr.read()[-3000:]
            assert _stats_over(channel).sessions == 1
        finally:
            kill_and_wait(client.pid)
            client.communicate()
        wait_for(lambda: _stats_over(channel).sessions == 0
                 and "(not watched) ended with its connection" in d.log(),
                 15, "the killed TCP client's session to close when its Hold call ended")
    finally:
        channel.close()
        d.stop()


def test_tcp_without_a_token_file_is_refused_at_start(tmp_path):
    proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"), "--tcp",
                           f"127.0.0.1:{free_port()}"], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2
    assert "--token-file" in proc.stderr
    loose = tmp_path / "loose-token"
    loose.write_text(TOKEN)
    loose.chmod(0o644)
    proc = subprocess.run([find_kilnd(), "--socket", str(tmp_path / "s.sock"), "--tcp",
                           f"127.0.0.1:{free_port()}", "--token-file", str(loose)],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "chmod 600" in proc.stderr


def test_tcp_with_tls(tmp_path, token_file, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    port = free_port()
    d = private_daemon(tmp_path, "--tcp", f"localhost:{port}", "--token-file", token_file,
                      "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        d.wait_ready(lambda: daemon.probe(d.socket, 1.0))
        assert "TLS" in d.log()
        # Plaintext is not spoken on the TLS port.
        plain = grpc.insecure_channel(f"localhost:{port}")
        with pytest.raises(grpc.RpcError):
            _stats_over(plain, (("authorization", f"Bearer {TOKEN}"),))
        plain.close()
        monkeypatch.setenv("KILN_TOKEN", TOKEN)
        monkeypatch.setenv("KILN_TLS_CA", str(cert))
        _compiled_matches_eager(f"tcp:localhost:{port}")
    finally:
        d.stop()


def _activation_socket(tmp_path):
    """A listening socket as systemd's socket unit makes it, and the shell
    prefix that passes it to kilnd the way systemd does (fd 3, LISTEN_FDS,
    LISTEN_PID: Kilnd's shell_prefix)."""
    path = str(tmp_path / "activated.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    fd = listener.fileno()
    prefix = f"exec 3<&{fd} {fd}<&-; LISTEN_PID=$$ LISTEN_FDS=1; export LISTEN_PID LISTEN_FDS;"
    return path, listener, prefix


def test_socket_passed_by_a_service_manager_is_served(tmp_path):
    path, listener, prefix = _activation_socket(tmp_path)
    d = private_daemon(tmp_path, shell_prefix=prefix, pass_fds=(listener.fileno(),))
    listener.close()  # the daemon holds it now
    try:
        d.wait_ready(lambda: daemon.probe(path, 1.0))
        assert "passed by the service manager" in d.log()
        _compiled_matches_eager(path)
    finally:
        d.stop()
    assert d.proc.returncode == 0, d.log()
    # The manager's socket is the manager's: left in place.
    assert os.path.exists(path)


def test_socket_activated_daemon_exits_when_idle_and_the_next_one_serves(tmp_path):
    # deploy/systemd/kilnd.service: systemd keeps the listening socket, kilnd
    # exits after --idle-exit-min unused, and the next connection starts
    # another on the same socket. Here the test plays systemd.
    path, listener, prefix = _activation_socket(tmp_path)
    # A client process that comes and goes (its session ends with it); it
    # imports torch and kiln and sets Dynamo up first, and opens its session
    # as soon as it is told the daemon is up, before compiling (a first
    # compile took over the daemon's 3 s of idle time on a loaded machine).
    # Under systemd the connection that starts kilnd is already queued.
    code = ("import sys, torch, kiln.backend, kiln.connection\n"
            "m = torch.nn.Linear(8, 4).eval()\n"
            "x = torch.randn(2, 8)\n"
            "torch.compile(lambda t: t + 1, backend='eager')(x)\n"
            "print('imported', flush=True)\n"
            "sys.stdin.readline()\n"
            "kiln.connection.get_connection(autostart=False).connect()\n"
            "c = torch.compile(m, backend='kiln', options={'fallback': 'error'})\n"
            "with torch.no_grad():\n"
            "    torch.testing.assert_close(c(x), m(x))\n")
    env = {**os.environ, "KILN_SOCKET": path, "KILN_AUTOSTART": "0"}
    try:
        for round_ in range(2):
            client = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env=env)
            assert client.stdout.readline().strip() == "imported", client.stderr.read()[-3000:]
            d = private_daemon(tmp_path, "--idle-exit-min", "0.05", shell_prefix=prefix,
                              pass_fds=(listener.fileno(),))
            d.wait_ready(lambda: daemon.probe(path, 1.0))
            _, err = client.communicate("go\n", timeout=120)
            assert client.returncode == 0, err[-3000:]
            d.proc.wait(timeout=60)
            assert d.proc.returncode == 0, d.log()
            assert "--idle-exit-min" in d.log()
            assert os.path.exists(path), f"round {round_}: the manager's socket was removed"
    finally:
        listener.close()


def test_objects_of_dead_clients_are_removed_at_start(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"/dev/shm/kiln-{dead.pid}-leftover"
    with open(stale, "wb") as f:
        f.write(b"\0" * 4096)
    os.chmod(stale, 0o600)
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    live = f"/dev/shm/kiln-{os.getpid()}-still-mine"
    with open(live, "wb") as f:
        f.write(b"\0" * 4096)
    os.utime(live, (time.time() - 3600, time.time() - 3600))
    d = private_daemon(tmp_path)
    try:
        d.wait_ready(lambda: daemon.probe(d.socket, 1.0))
        assert not os.path.exists(stale), d.log()
        assert os.path.exists(live)
    finally:
        d.stop()
        os.unlink(live)
        if os.path.exists(stale):
            os.unlink(stale)


def test_sigterm_finishes_the_call_in_flight_then_refuses_and_cleans_up(tmp_path):
    # The call's run waits at the daemon's test gate: SIGTERM lands while it
    # is in flight, and the run goes on only once the daemon is draining.
    gate = CallGate(tmp_path)
    d = private_daemon(tmp_path, *gate.args)
    try:
        d.wait_ready(lambda: daemon.probe(d.socket, 1.0))
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(4)]).eval()
        compiled = torch.compile(model, backend="kiln",
                                 options={"socket": d.socket, "autostart": False,
                                          "fallback": "error"})
        x = torch.randn(64, 256)
        with torch.no_grad():
            expected = model(x)
            with gate.open():
                compiled(x)  # compiled and warm
        result, errors = {}, []

        def call():
            try:
                with torch.no_grad():  # grad mode is per thread (and guarded)
                    result["y"] = compiled(x)
            except Exception as e:  # noqa: BLE001 - reported below
                import traceback
                errors.append("".join(traceback.format_exception(e))[-3000:])

        thread = threading.Thread(target=call)
        thread.start()
        gate.wait_for_call()
        os.kill(d.proc.pid, signal.SIGTERM)
        wait_for(lambda: "draining" in d.log(), 60, "kilnd to begin draining")
        gate.release()
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert not errors, errors
        torch.testing.assert_close(result["y"], expected, rtol=1e-4, atol=1e-4)
        assert d.proc.wait(timeout=60) == 0, d.log()
        assert not os.path.exists(d.socket)
        assert not os.path.exists(d.socket + ".lock")
    finally:
        gate.close()
        d.stop()
        torch._dynamo.reset()
        connection.get_connection(d.socket, autostart=False).close()


@pytest.mark.skipif(not can_unshare_pid(), reason="needs unshare --pid (root or user namespaces)")
def test_killed_client_the_daemon_cannot_watch_is_released_when_its_connection_closes(tmp_path):
    # kilnd in a pid namespace of its own, like a container: the kernel
    # reports this test's processes to it as pid 0, so it cannot watch them
    # and asks each for a Hold call; a client's death ends the call.
    sock = str(tmp_path / "kilnd.sock")
    log = tmp_path / "kilnd.log"
    with open(log, "ab") as out:
        daemon_proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", find_kilnd(), "--socket", sock, "--no-cache"],
            stdout=out, stderr=out, start_new_session=True)
    code = (
        "import sys, time, torch, torch.nn as nn\n"
        "m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).eval()\n"
        "c = torch.compile(m, backend='kiln', options={'fallback': 'error'})\n"
        "x = torch.randn(3, 16)\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n")
    env = dict(os.environ, KILN_SOCKET=sock, KILN_AUTOSTART="0")
    channel = grpc.insecure_channel(daemon.target_for(sock))
    try:
        wait_for(lambda: daemon.probe(sock, 1.0), 30, "kilnd in its pid namespace")
        client = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        try:
            assert client.stdout.readline().strip() == "ready", client.stderr.read()[-3000:]
            during = _stats_over(channel)
            assert during.sessions >= 1 and during.live_handles >= 1
        finally:
            kill_and_wait(client.pid)
            client.communicate()

        # The stats show the session gone as soon as it is closed; its shared
        # memory is unlinked and the close logged just after, so wait for the
        # log line too before looking in /dev/shm.
        def released() -> bool:
            s = _stats_over(channel)
            return (s.sessions == 0 and s.live_handles == 0 and s.channels == 0
                    and "(not watched) ended with its connection" in log.read_text(errors="replace"))
        wait_for(released, 60, "the killed client's session to close and its close to be logged")
        assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"kiln-{client.pid}-")]
    finally:
        channel.close()
        try:
            os.killpg(daemon_proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        daemon_proc.wait(timeout=30)
