"""Point 8: the client trusts only a daemon of its own user.

Another local user can create /tmp/kiln-<uid> (or any socket directory in
a place others can write to) before the client does and answer on a socket
there as a fake kilnd: it would receive every tensor, and answer with
whatever it liked. Each test below sets up one way of doing that, with a
fake kilnd run as another user (uid 65534) that answers every call, and
checks that the client refuses with a message saying what is wrong, and
that the fake was never called.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest
import torch

from testing.daemons import find_kilnd
from kiln import connection, daemon
from kiln.v1 import kiln_pb2

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root to run the fake kilnd as another user")

OTHER_UID = 65534  # nobody: the other local user
CLIENT_UID = 61234  # a user of no account here, whose /tmp/kiln-<uid> is at stake

# A fake kilnd: a gRPC server on a unix socket that answers every call with
# an empty message and prints the name of each call it gets. It starts as
# root (the venv's Python lives where only root can read) and becomes the
# other user before it creates its socket: the kernel records that user as
# the listener's.
_FAKE_KILND = r"""
import os, sys
from concurrent import futures
import grpc, grpc._server

def answer(method):
    def unary(request, context):
        print(method, flush=True)
        return b""
    def stream(request, context):
        print(method, flush=True)
        return iter(())
    return unary, stream

class Everything(grpc.GenericRpcHandler):
    def service(self, details):
        unary, stream = answer(details.method)
        if details.method.endswith("/Hold"):
            return grpc.unary_stream_rpc_method_handler(stream)
        return grpc.unary_unary_rpc_method_handler(unary)

socket_path, uid = sys.argv[1], int(sys.argv[2])
server = grpc.server(futures.ThreadPoolExecutor(2))
server.add_generic_rpc_handlers((Everything(),))
os.setgroups([])
os.setgid(uid)
os.setuid(uid)
server.add_insecure_port("unix:" + socket_path)
os.chmod(socket_path, 0o777)  # so that the client may connect
server.start()
print("ready", flush=True)
sys.stdin.read()  # until the test closes it
server.stop(None)
"""


class FakeKilnd:
    """The fake, running as OTHER_UID, listening on `socket_path`."""

    def __init__(self, socket_path: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FAKE_KILND, socket_path, str(OTHER_UID)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.proc.kill()
            pytest.fail(f"the fake kilnd did not start: {line}\n{self.proc.stderr.read()}")

    def stop(self) -> list[str]:
        """Stops it; the calls it got."""
        out, _ = self.proc.communicate("", timeout=60)
        return [line for line in out.splitlines() if line]


@pytest.fixture
def place():
    """A directory for the test's socket directories: root's, but others
    may pass through it (as they may /tmp) to reach the fake's directory."""
    base = tempfile.mkdtemp(prefix="kh-trust-", dir="/tmp")
    os.chmod(base, 0o711)
    fakes: list[FakeKilnd] = []
    yield Path(base), fakes
    for fake in fakes:
        if fake.proc.poll() is None:
            fake.proc.kill()
            fake.proc.wait(timeout=30)
    shutil.rmtree(base, ignore_errors=True)


def _fake_in_own_directory(place) -> tuple[Path, FakeKilnd]:
    """The other user's private directory, with the fake listening in it."""
    base, fakes = place
    evil = base / "evil"
    evil.mkdir(mode=0o700)
    os.chown(evil, OTHER_UID, OTHER_UID)
    fake = FakeKilnd(str(evil / "kilnd.sock"))
    fakes.append(fake)
    return evil, fake


def _refused(socket_path: str, autostart: bool = False) -> str:
    """The client's refusal to use socket_path (the test fails if it
    talks to whatever answers there instead)."""
    with pytest.raises(PermissionError) as info:  # UntrustedSocketError is one
        daemon.ensure_daemon(socket_path, autostart=autostart, timeout_s=20)
    assert type(info.value).__name__ == "UntrustedSocketError", repr(info.value)
    return str(info.value)


# 0755: the client can reach the fake's socket; 0700: it cannot even look.
@pytest.mark.parametrize("mode", [0o755, 0o700], ids=["0755", "0700"])
def test_a_default_socket_directory_made_by_another_user_is_refused(place, mode):
    # The other user creates the client's default directory, /tmp/kiln-<uid>
    # of the client's uid, and serves a fake kilnd in it.
    base, fakes = place
    default_dir = Path(f"/tmp/kiln-{CLIENT_UID}")
    if default_dir.exists() or default_dir.is_symlink():
        pytest.skip(f"{default_dir} exists already")
    default_dir.mkdir()
    try:
        os.chown(default_dir, OTHER_UID, OTHER_UID)
        os.chmod(default_dir, mode)
        fake = FakeKilnd(str(default_dir / "kilnd.sock"))
        fakes.append(fake)
        # The client, as CLIENT_UID (it imports as root, as the fake does),
        # at its defaults: auto-start on.
        code = ("import os, sys\n"
                "from kiln import daemon\n"
                "os.setgroups([]); os.setgid(int(sys.argv[1])); os.setuid(int(sys.argv[1]))\n"
                "path = daemon.default_socket_path()\n"
                "print(path, flush=True)\n"
                "try:\n"
                "    daemon.ensure_daemon(path, autostart=True, timeout_s=20)\n"
                "    print('TRUSTED')\n"
                "except PermissionError as e:\n"
                "    print('REFUSED', type(e).__name__, e)\n")
        env = {k: v for k, v in os.environ.items()
               if k not in ("KILN_SOCKET", "XDG_RUNTIME_DIR", "HOME")}
        env["KILN_DAEMON"] = find_kilnd()
        client = subprocess.run([sys.executable, "-c", code, str(CLIENT_UID)], env=env, cwd="/",
                                capture_output=True, text=True, timeout=120)
        lines = client.stdout.splitlines()
        assert lines and lines[0] == str(default_dir / "kilnd.sock"), client.stderr[-3000:]
        assert len(lines) > 1 and lines[1].startswith("REFUSED UntrustedSocketError"), (
            client.stdout, client.stderr[-3000:])
        assert f"belongs to uid {OTHER_UID}, not to you (uid {CLIENT_UID})" in lines[1]
        # Nothing of the client's was written there, and the fake got no call.
        assert sorted(os.listdir(default_dir)) == ["kilnd.sock"]
        assert fake.stop() == []
    finally:
        shutil.rmtree(default_dir, ignore_errors=True)


def test_a_socket_directory_of_another_user_is_refused(place):
    evil, fake = _fake_in_own_directory(place)
    socket_path = str(evil / "kilnd.sock")
    message = _refused(socket_path)
    assert f"belongs to uid {OTHER_UID}, not to you (uid 0)" in message, message
    assert str(evil) in message
    conn = connection.Connection(socket_path, autostart=True)
    with pytest.raises(PermissionError, match="belongs to uid"):
        conn.connect()
    cli = subprocess.run([sys.executable, "-m", "kiln.cli", "--socket", socket_path, "status"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "belongs to uid" in cli.stderr, (cli.stdout, cli.stderr)
    assert sorted(os.listdir(evil)) == ["kilnd.sock"]  # no lock or log of ours
    assert fake.stop() == []


def test_a_socket_directory_open_to_other_users_is_refused(place):
    base, fakes = place
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # ours, but anyone may put a socket in it
    fake = FakeKilnd(str(shared / "kilnd.sock"))
    fakes.append(fake)
    message = _refused(str(shared / "kilnd.sock"), autostart=True)
    assert "mode is 0777, open to other users; it must be 0700" in message, message
    assert fake.stop() == []


def test_a_symlink_in_place_of_the_socket_directory_is_refused(place):
    base, _ = place
    evil, fake = _fake_in_own_directory(place)
    link = base / "kiln"
    link.symlink_to(evil)
    message = _refused(str(link / "kilnd.sock"), autostart=True)
    assert "is a symbolic link" in message and str(link) in message, message
    assert fake.stop() == []


def test_a_daemon_of_another_user_in_our_directory_is_refused(place):
    # The directory is ours and private, but the process answering on the
    # socket in it runs as another user (here: the fake's socket moved in;
    # only root can do that, or a process of ours on another user's behalf).
    base, _ = place
    evil, fake = _fake_in_own_directory(place)
    ours = base / "ours"
    ours.mkdir(mode=0o700)
    os.rename(evil / "kilnd.sock", ours / "kilnd.sock")
    socket_path = str(ours / "kilnd.sock")
    message = _refused(socket_path, autostart=True)
    assert f"runs as uid {OTHER_UID}, not as you (uid 0)" in message, message
    # Through the backend: a clear error, never the fake's answers.
    model = torch.nn.Linear(4, 4).eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"socket": socket_path, "fallback": "error"})
    with pytest.raises(Exception, match=f"runs as uid {OTHER_UID}"):
        with torch.no_grad():
            compiled(torch.randn(2, 4))
    torch._dynamo.reset()
    stop = subprocess.run([sys.executable, "-m", "kiln.cli", "--socket", socket_path, "stop"],
                          capture_output=True, text=True, timeout=120)
    assert stop.returncode == 1 and f"runs as uid {OTHER_UID}" in stop.stderr, stop.stderr
    assert fake.stop() == []


def _stop_daemon_started_in(directory: Path) -> None:
    """If the client started a kilnd there (it must not), stops it."""
    lock = directory / "kilnd.sock.lock"
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return
    if pid > 0:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("planted", ["start.lock", "kilnd.log"])
def test_links_in_the_socket_directory_are_not_followed(place, planted, monkeypatch):
    base, _ = place
    ours = base / "ours"
    ours.mkdir(mode=0o700)
    victim = base / "victim"
    victim.write_text("precious\n")
    (ours / planted).symlink_to(victim)
    monkeypatch.setenv("KILN_DAEMON", find_kilnd())
    try:
        message = _refused(str(ours / "kilnd.sock"), autostart=True)
        assert f"refusing {ours / planted}: it is a symbolic link" in message, message
        assert victim.read_text() == "precious\n"
        assert not (ours / "kilnd.sock").exists()  # no daemon started
    finally:
        _stop_daemon_started_in(ours)
