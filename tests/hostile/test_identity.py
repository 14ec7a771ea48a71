"""Point 6: a client cannot pass for another process, reach the daemon
around its credential check, see other clients, or forge log lines.

- The pid a client claims over the unix socket is held to the kernel's
  (SO_PEERCRED) whatever pid namespace it claims, 0 included; a client in a
  nested pid namespace (a container beside the daemon) is held to its pid
  there, and is still served and watched.
- --tcp takes HOST:PORT only: no unix: listener that would skip the
  daemon's own, credential-checking one.
- Over TCP GetStats lists the caller's own session only; QueryConstants
  needs a session.
- A client's name cannot put a newline (or a carriage return, or terminal
  escapes) into the daemon's text log.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest
import torch

from conftest import REPO, Bystander, RawClient, sha256_hex
from testing.daemons import Kilnd, find_kilnd
from testing.processes import can_unshare_pid, free_port
from kiln import daemon
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

TOKEN = "hostile-identity-token-0123456789"


def _open_session(socket_path: str, pid: int, pid_namespace: int,
                  name: str = "liar") -> kiln_pb2.OpenSessionResponse:
    channel = grpc.insecure_channel(daemon.target_for(socket_path))
    try:
        return kiln_pb2_grpc.KilnStub(channel).OpenSession(kiln_pb2.OpenSessionRequest(
            pid=pid, pid_namespace=pid_namespace, client_name=name), timeout=10)
    finally:
        channel.close()


@pytest.fixture
def victim():
    """Another process of the same user: what a lying client would pass for
    (its shared-memory objects are named kiln-<its pid>-...)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                            stdin=subprocess.PIPE)
    yield proc
    proc.stdin.close()  # it reads end of file and exits
    proc.wait(timeout=30)


def test_a_claimed_pid_is_checked_whatever_namespace_is_claimed(kilnd, bystander, victim):
    own_namespace = os.stat("/proc/self/ns/pid").st_ino
    # 0 ("unknown") and a namespace that is not the client's skipped the
    # check before; the daemon's own was always checked.
    for claimed_namespace in (0, own_namespace + 7919, own_namespace):
        with pytest.raises(grpc.RpcError) as info:
            _open_session(kilnd.socket, victim.pid, claimed_namespace)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, (
            claimed_namespace, info.value.code(), info.value.details())
        assert (f"claims pid {victim.pid} but the connection is from pid {os.getpid()}"
                in info.value.details()), info.value.details()
    # Its own pid, with a namespace that is not its own, is a lie too.
    with pytest.raises(grpc.RpcError) as info:
        _open_session(kilnd.socket, os.getpid(), own_namespace + 7919)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "pid namespace" in info.value.details()
    # The truth, said or left to the kernel, is served and watched.
    for claimed_namespace in (own_namespace, 0):
        response = _open_session(kilnd.socket, os.getpid(), claimed_namespace, "honest")
        assert response.session_id and not response.hold_required


# Runs as pid 1 of a pid namespace of its own, nested in the daemon's, with
# the daemon's /dev/shm: a container's client beside a daemon on the host.
_NESTED_CLIENT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[2])
import grpc, torch
from conftest import RawClient, relu_graph
socket_path, daemon_namespace = sys.argv[1], int(sys.argv[3])
own_namespace = os.stat("/proc/self/ns/pid").st_ino
result = {"pid": os.getpid()}

def attempt(key, pid, pid_namespace):
    try:
        RawClient(socket_path, name=key, pid=pid, pid_namespace=pid_namespace).close()
        result[key] = "OK"
    except grpc.RpcError as e:
        result[key] = e.code().name + ": " + e.details()

attempt("other_pid_unsaid_namespace", os.getpid() + 1, 0)
attempt("other_pid_own_namespace", os.getpid() + 1, own_namespace)
attempt("claims_daemon_namespace", os.getpid(), daemon_namespace)
# The truth: served, and through a region named for its pid there.
client = RawClient(socket_path, name="nested")
region = client.region(1 << 16)
handle = client.compile(relu_graph((64, 64))).handle
x = torch.randn(64, 64)
client.execute(handle, [region.write(0, x)], [region.descriptor(32768, torch.float32, (64, 64))])
result["served"] = bool(torch.equal(region.view(32768, torch.float32, (64, 64)), torch.relu(x)))
# The daemon sees this process: it watches it, no Hold call needed.
from kiln.v1 import kiln_pb2
second = client.stub.OpenSession(kiln_pb2.OpenSessionRequest(
    pid=os.getpid(), pid_namespace=own_namespace, client_name="nested-2"), timeout=10)
result["hold_required"] = second.hold_required
client.stub.CloseSession(kiln_pb2.CloseSessionRequest(session_id=second.session_id), timeout=10)
client.close()
print(json.dumps(result), flush=True)
"""


@pytest.mark.skipif(not can_unshare_pid(), reason="needs unshare --pid (root or user namespaces)")
def test_a_client_in_a_nested_pid_namespace_is_held_to_its_pid_there(kilnd, bystander):
    daemon_namespace = os.stat(f"/proc/{kilnd.proc.pid}/ns/pid").st_ino
    run = subprocess.run(
        ["unshare", "--pid", "--fork", sys.executable, "-c", _NESTED_CLIENT, kilnd.socket,
         str(REPO / "tests" / "hostile"), str(daemon_namespace)],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["pid"] == 1  # its pid in its own namespace
    for key in ("other_pid_unsaid_namespace", "other_pid_own_namespace",
                "claims_daemon_namespace"):
        assert result[key].startswith("PERMISSION_DENIED"), (key, result[key])
    assert "claims pid 2 but the connection is from pid 1 of pid namespace" in \
        result["other_pid_unsaid_namespace"]
    assert result["served"]
    assert result["hold_required"] is False
    assert "opened by pid 1 (nested" in Path(kilnd.log_file).read_text(errors="replace")


@pytest.mark.parametrize("address", ["unix:{dir}/side.sock", "unix-abstract:kiln-hostile",
                                     "unix:7000"])
def test_tcp_takes_only_host_and_port(tmp_path, address):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    address = address.format(dir=tmp_path)
    log = tmp_path / "kilnd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [find_kilnd(), "--socket", str(tmp_path / "kilnd.sock"), "--no-cache", "--tcp",
             address, "--token-file", str(token_file)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    try:
        # A refused flag exits at once; the bound is for a daemon that serves.
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        served = ""
        side = address.removeprefix("unix:")
        if address.startswith("unix:/") and daemon.probe(side, 5.0):
            served = f"; calls on {side} are served without the token"
        proc.kill()
        proc.wait(timeout=30)
        pytest.fail(f"kilnd accepted --tcp {address}{served}")
    text = log.read_text(errors="replace")
    assert code == 2, text
    assert "--tcp takes HOST:PORT" in text, text


class TcpDaemon:
    """A kilnd for this test with --tcp and a token, and a bystander on its
    unix socket."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="kh-tcp-", dir="/tmp")
        token_file = Path(self.workdir) / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        self.port = free_port()
        self.daemon = Kilnd(self.workdir, ["--tcp", f"127.0.0.1:{self.port}",
                                           "--token-file", str(token_file)])
        self.channel: grpc.Channel | None = None

    def tcp_stub(self) -> kiln_pb2_grpc.KilnStub:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        return kiln_pb2_grpc.KilnStub(self.channel)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
        self.daemon.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def tcp_kilnd():
    d = TcpDaemon()
    try:
        d.daemon.start()
        bystander = Bystander(d.daemon.socket)
        yield d
        assert d.daemon.alive(), f"kilnd {d.daemon.exit_description()}:\n{d.daemon.log()}"
        bystander.check()
        bystander.close()
    finally:
        d.close()


def test_over_tcp_get_stats_lists_only_the_callers_session(tcp_kilnd):
    token = (("authorization", f"Bearer {TOKEN}"),)
    stub = tcp_kilnd.tcp_stub()
    session = stub.OpenSession(kiln_pb2.OpenSessionRequest(
        pid=os.getpid(), client_name="over-tcp"), timeout=10, metadata=token)
    assert session.hold_required  # nothing vouches for a TCP client's pid

    def names(response):
        return sorted(c.client_name for c in response.clients)

    own = stub.GetStats(kiln_pb2.StatsRequest(session_id=session.session_id), timeout=10,
                        metadata=token)
    assert names(own) == ["over-tcp"]
    assert own.sessions == 2  # counts are the daemon's; who they are is not
    anonymous = stub.GetStats(kiln_pb2.StatsRequest(), timeout=10, metadata=token)
    assert names(anonymous) == []
    # On the unix socket the daemon's user sees every client.
    local = RawClient(tcp_kilnd.daemon.socket, name="local")
    try:
        assert names(local.stub.GetStats(kiln_pb2.StatsRequest(), timeout=10)) == [
            "bystander", "local", "over-tcp"]
    finally:
        local.close()


def test_query_constants_needs_a_session(kilnd, bystander, hostile):
    weight = torch.randn(1024)
    region = hostile.region(1 << 16)
    digest = sha256_hex(weight)
    hostile.upload([(digest, region.write(0, weight))])
    channel = grpc.insecure_channel(daemon.target_for(kilnd.socket))
    stub = kiln_pb2_grpc.KilnStub(channel)
    try:
        for session_id, code in (("", grpc.StatusCode.INVALID_ARGUMENT),
                                 (secrets.token_hex(16), grpc.StatusCode.NOT_FOUND)):
            with pytest.raises(grpc.RpcError) as info:
                stub.QueryConstants(kiln_pb2.QueryConstantsRequest(
                    session_id=session_id, hashes=[digest, "0" * 64]), timeout=10)
            assert info.value.code() == code, (info.value.code(), info.value.details())
        answer = stub.QueryConstants(kiln_pb2.QueryConstantsRequest(
            session_id=hostile.session, hashes=[digest, "0" * 64]), timeout=10)
        assert list(answer.missing) == ["0" * 64]
    finally:
        channel.close()


def test_a_client_name_cannot_forge_log_lines(kilnd, bystander):
    marker = f"FORGED-{secrets.token_hex(4)}"
    forged = f"2026-01-01 00:00:00.000 [kilnd 1] info session 0000 opened by pid 1 ({marker})"
    name = f"innocent\n{forged}\r{forged}\x1b[2K"
    client = RawClient(kilnd.socket, name=name)
    client.close()
    # The line is written (and flushed: flush_on info) before OpenSession
    # answers.
    lines = Path(kilnd.log_file).read_text(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith(forged)], kilnd.log()
    assert not [line for line in lines if "\x1b" in line or "\r" in line], kilnd.log()
    opened = [line for line in lines if "opened by pid" in line and "innocent" in line]
    assert len(opened) == 1, kilnd.log()
    assert f"innocent\\n{forged}\\r{forged}\\x1b[2K" in opened[0], opened[0]
