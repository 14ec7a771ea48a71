"""Finding, probing and starting the kilnd daemon.

The daemon is shared by every client of a user: it listens on a unix socket
(see default_socket_path) and is started on demand, detached, by whichever
client first finds nothing answering. A flock on <socketdir>/start.lock makes
concurrent starters end with one daemon.

Nothing in the socket's directory is used before the directory is checked
to be this user's alone, and nothing answering on the socket is talked to
before the kernel says it runs as this user (socket_dir.py): a refusal
raises UntrustedSocketError.
"""
from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import sys
import time

import grpc

from kiln.socket_dir import SocketDir, UntrustedSocketError
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

log = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 2.0
# kilnd's exit code when another daemon holds the socket's lock.
LOCK_HELD_EXIT = 3
# Time a new attempt needs before the deadline (a kilnd finding the lock
# still held exits within tens of milliseconds): none is started later, so
# one cannot outlive the caller's wait and start unseen.
_RESTART_MARGIN_S = 0.5


class DaemonError(RuntimeError):
    """The daemon could not be reached or started."""


class _LockHeld(DaemonError):
    """The daemon started exited because another one holds the socket's lock."""


def default_socket_path() -> str:
    """$KILN_SOCKET, else $XDG_RUNTIME_DIR/kiln/kilnd.sock, else /tmp/kiln-<uid>/kilnd.sock."""
    env = os.environ.get("KILN_SOCKET")
    if env:
        return env
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        return os.path.join(runtime_dir, "kiln", "kilnd.sock")
    return f"/tmp/kiln-{os.getuid()}/kilnd.sock"


def default_cache_dir() -> str:
    """$KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln."""
    env = os.environ.get("KILN_CACHE_DIR")
    if env:
        return env
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "kiln")
    return os.path.join(os.path.expanduser("~"), ".cache", "kiln")


TCP_PREFIX = "tcp:"


def is_tcp(address: str) -> bool:
    """A daemon reached over TCP ("tcp:HOST:PORT") rather than a unix socket."""
    return address.startswith(TCP_PREFIX)


def target_for(socket_path: str) -> str:
    """The gRPC target string for a unix socket path or "tcp:HOST:PORT"."""
    if is_tcp(socket_path):
        return socket_path[len(TCP_PREFIX):]
    return f"unix:{socket_path}"


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds "authorization: Bearer <token>" to every call (kilnd --tcp
    refuses calls without its token), the Hold stream included: a TCP
    client's session lives as long as its Hold call."""

    def __init__(self, token: str):
        self._metadata = (("authorization", f"Bearer {token}"),)

    def _with_token(self, details):
        metadata = tuple(details.metadata or ()) + self._metadata
        return details._replace(metadata=metadata) if hasattr(details, "_replace") else \
            _CallDetails(details.method, details.timeout, metadata, details.credentials,
                         getattr(details, "wait_for_ready", None),
                         getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (
            credentials, wait_for_ready, compression)


def open_channel(socket_path: str, options: tuple = (),
                 socket_dir: SocketDir | None = None) -> grpc.Channel:
    """A channel to the daemon. On a unix socket, through `socket_dir` (the
    checked directory ensure_daemon returns; keep it open as long as the
    channel) when given. Over TCP: TLS when KILN_TLS_CA names the CA
    certificate (PEM) to trust, and the token in KILN_TOKEN on every call."""
    if not is_tcp(socket_path):
        target = socket_dir.target if socket_dir is not None else target_for(socket_path)
        return grpc.insecure_channel(target, options=options)
    target = target_for(socket_path)
    ca_file = os.environ.get("KILN_TLS_CA")
    if ca_file:
        with open(ca_file, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    token = os.environ.get("KILN_TOKEN")
    if token:
        channel = grpc.intercept_channel(channel, _TokenInterceptor(token))
    return channel


_LOG_NAME = "kilnd.log"
_START_LOCK_NAME = "start.lock"


def log_path_for(socket_path: str) -> str:
    return os.path.join(os.path.dirname(socket_path) or ".", _LOG_NAME)


def find_daemon_binary() -> str:
    """$KILN_DAEMON, else kilnd on PATH, else <sys.prefix>/bin/kilnd."""
    env = os.environ.get("KILN_DAEMON")
    if env:
        return env
    on_path = shutil.which("kilnd")
    if on_path:
        return on_path
    candidate = os.path.join(sys.prefix, "bin", "kilnd")
    if os.access(candidate, os.X_OK):
        return candidate
    raise DaemonError(
        "cannot find the kilnd binary: set $KILN_DAEMON, put kilnd on PATH "
        f"or install it as {candidate}")


def probe(socket_path: str, timeout_s: float = PROBE_TIMEOUT_S,
          socket_dir: SocketDir | None = None) -> bool:
    """True if a daemon answers GetCapabilities on the socket.

    On a unix socket the directory is checked first (or `socket_dir`, the
    checked directory, is used), then the user the process listening runs
    as: UntrustedSocketError when either is not this user's."""
    if is_tcp(socket_path):
        return _answers(open_channel(socket_path), timeout_s)
    own_dir = socket_dir is None
    if own_dir:
        socket_dir = SocketDir.open_existing(socket_path)
        if socket_dir is None:
            return False
    try:
        if not socket_dir.has_socket() or socket_dir.server_credentials(timeout_s) is None:
            return False
        return _answers(open_channel(socket_path, socket_dir=socket_dir), timeout_s)
    finally:
        if own_dir:
            socket_dir.close()


def _answers(channel: grpc.Channel, timeout_s: float) -> bool:
    try:
        kiln_pb2_grpc.KilnStub(channel).GetCapabilities(
            kiln_pb2.CapabilitiesRequest(), timeout=timeout_s)
        return True
    except grpc.RpcError:
        return False
    finally:
        channel.close()


def _wait_ready(socket_dir: SocketDir, proc: subprocess.Popen | None,
                deadline: float) -> None:
    socket_path = socket_dir.socket_path
    log_file = log_path_for(socket_path)
    while time.monotonic() < deadline:
        remaining = max(0.1, deadline - time.monotonic())
        if probe(socket_path, timeout_s=min(PROBE_TIMEOUT_S, remaining), socket_dir=socket_dir):
            return
        if proc is not None and proc.poll() is not None:
            message = (f"kilnd exited with code {proc.returncode} before serving on "
                       f"{socket_path}; see {log_file}{_log_tail(socket_dir)}")
            raise (_LockHeld if proc.returncode == LOCK_HELD_EXIT else DaemonError)(message)
        time.sleep(0.05)
    raise DaemonError(
        f"kilnd did not answer on {socket_path} in the time allowed; "
        f"see {log_file}{_log_tail(socket_dir)}")


def _log_tail(socket_dir: SocketDir, lines: int = 5) -> str:
    try:
        fd = socket_dir.open_file(_LOG_NAME, os.O_RDONLY)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - 4096))
        tail = f.read().decode(errors="replace").splitlines()[-lines:]
    return "".join("\n  " + line for line in tail)


def ensure_daemon(socket_path: str, autostart: bool = True,
                  timeout_s: float = START_TIMEOUT_S, cache_dir: str | None = None,
                  idle_min: float | None = None) -> SocketDir | None:
    """Returns once a daemon answers on socket_path, starting one if allowed
    (with `cache_dir` as its cache directory, and `idle_min` as its
    --idle-exit-min, if given: a daemon started on demand goes away once no
    client has used it for that many minutes).

    For a unix socket, returns its checked directory (SocketDir): open a
    channel through it (open_channel(..., socket_dir=...)) and keep it open
    as long as the channel. None for TCP.

    Raises DaemonError naming the socket (and the daemon log, if started),
    UntrustedSocketError when the socket's directory or the process
    answering on it is not this user's.
    """
    if is_tcp(socket_path):
        if probe(socket_path):
            return None
        raise DaemonError(
            f"no kilnd daemon answers on {socket_path} (a TCP daemon is not started on "
            f"demand; is KILN_TOKEN set to its token, and KILN_TLS_CA for TLS?)")
    socket_dir = SocketDir.open_existing(socket_path)
    try:
        if socket_dir is not None and probe(socket_path, socket_dir=socket_dir):
            return socket_dir
        if not autostart:
            raise DaemonError(
                f"no kilnd daemon answers on {socket_path} and auto-start is off "
                "(KILN_AUTOSTART=0 / options={'autostart': False}); start it with "
                f"`kilnd --socket {socket_path}`")
        if socket_dir is None:
            socket_dir = SocketDir(socket_path, create=True)
        _start(socket_dir, timeout_s, cache_dir, idle_min)
        return socket_dir
    except BaseException:
        if socket_dir is not None:
            socket_dir.close()
        raise


def _start(socket_dir: SocketDir, timeout_s: float, cache_dir: str | None,
           idle_min: float | None) -> None:
    socket_path = socket_dir.socket_path
    log_file = log_path_for(socket_path)
    deadline = time.monotonic() + timeout_s
    # Opened through the checked directory, never following a link: a link
    # planted there would have the client lock, and the daemon log into,
    # a file of someone else's choosing.
    lock = socket_dir.open_file(_START_LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        # Whoever holds the lock starts the daemon; the others find it
        # answering once they get the lock.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if probe(socket_path, socket_dir=socket_dir):
            return
        binary = find_daemon_binary()
        cmd = [binary, "--socket", socket_path]
        if cache_dir:
            cmd += ["--cache-dir", cache_dir]
        if idle_min is not None:
            cmd += ["--idle-exit-min", f"{idle_min:g}"]
        log.info("starting %s (log: %s)", " ".join(cmd), log_file)
        pause = 0.1
        while True:
            out = socket_dir.open_file(_LOG_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                proc = subprocess.Popen(
                    cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    start_new_session=True, close_fds=True)
            finally:
                os.close(out)
            try:
                _wait_ready(socket_dir, proc, deadline)
                return
            except _LockHeld as held:
                # A daemon that no longer answers still holds the lock:
                # one finishing an idle shutdown (it refuses calls while
                # it drains). Start again once it has let go, while there
                # is time to see the new one through its start; then the
                # exit code is the error.
                time.sleep(pause)
                pause = min(2 * pause, 1.0)
                if probe(socket_path, socket_dir=socket_dir):
                    return
                if time.monotonic() + _RESTART_MARGIN_S >= deadline:
                    raise DaemonError(str(held)) from None
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
