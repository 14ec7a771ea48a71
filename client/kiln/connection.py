"""The client's link to kilnd: channel, session, shared memory, constants.

One Connection per (socket, autostart) per process, shared by every compiled
graph. Every RPC carries a deadline. When the daemon goes away (UNAVAILABLE,
or NOT_FOUND for state it has forgotten), callers invoke reconnect(), which
starts the daemon again if allowed, opens a new session and bumps
`generation`; everything registered under the old generation (regions,
constants, compiled handles) is then re-created lazily by its owner.

Thread-safety: all methods may be called from any thread. Reconnection is
serialised by a lock; each thread gets its own shared-memory arena.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import logging
import dataclasses
import os
import threading
import time
from typing import Callable, Mapping, Sequence

import grpc
import torch

from kiln import channel as channel_mod
from kiln import daemon, shm
from kiln import output_pool as output_pool_mod
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

log = logging.getLogger(__name__)
# One debug line per RPC (see LoggedStub); its own name so it can be
# turned on or off apart from the rest of the client.
rpc_log = logging.getLogger("kiln.rpc")

# Deadlines per RPC, in seconds.
SMALL_CALL_TIMEOUT_S = 10.0
UPLOAD_TIMEOUT_S = 120.0
COMPILE_TIMEOUT_S = 600.0
EXECUTE_TIMEOUT_S = 60.0

# Constants are uploaded through temporary regions of at most this size
# (one constant larger than this gets a region of its own).
UPLOAD_BATCH_BYTES = 256 << 20

_CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", 64 << 20),
    ("grpc.max_receive_message_length", 64 << 20),
]


def is_daemon_lost(error: grpc.RpcError) -> bool:
    """True for errors after which reconnecting (and retrying once) may help."""
    return error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND)


def _pid_namespace() -> int:
    """Inode of this process's pid namespace (0 if unknown): with it the
    daemon can tell when this process is gone and free its session."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def sha256_of(tensor: torch.Tensor) -> str:
    """Lowercase hex SHA-256 of the tensor's contiguous bytes."""
    import hashlib
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(flat.numpy()).hexdigest()


# Below this many bytes in all, hashing on one thread is as fast.
_PARALLEL_HASH_BYTES = 8 << 20
_hash_pool: concurrent.futures.ThreadPoolExecutor | None = None
_hash_pool_lock = threading.Lock()


def _hash_executor() -> concurrent.futures.ThreadPoolExecutor | None:
    global _hash_pool
    workers = min(os.cpu_count() or 1, 8)
    if workers < 2:
        return None
    with _hash_pool_lock:
        if _hash_pool is None:
            _hash_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=workers, thread_name_prefix="kiln-hash")
        return _hash_pool


def sha256_many(tensors: Sequence[torch.Tensor]) -> list[str]:
    """sha256_of each tensor. A model's weights (hundreds of MB) are hashed
    on every core: hashlib releases the GIL while it hashes."""
    total = sum(t.numel() * t.element_size() for t in tensors)
    pool = _hash_executor() if total >= _PARALLEL_HASH_BYTES and len(tensors) >= 2 else None
    if pool is None:
        return [sha256_of(t) for t in tensors]
    return list(pool.map(sha256_of, tensors))


@dataclasses.dataclass
class ConstantTransfer:
    """Constants (and their bytes) uploaded, and those not uploaded
    because the daemon already held them (from this session, or uploaded
    earlier by any client: its store is shared) or held what the compiled
    graph reads instead (a graph it compiled before, with its folds and
    packings saved)."""
    uploaded: int = 0
    uploaded_bytes: int = 0
    reused: int = 0
    reused_bytes: int = 0

    def add(self, other: "ConstantTransfer") -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))


def _summary(method: str, request: object, response: object | None) -> str:
    """What an RPC carried, for the debug log: message sizes, and for the
    calls that move data through shared memory, what they moved."""
    parts = [f"request {request.ByteSize()} B"]
    if response is not None:
        parts.append(f"response {response.ByteSize()} B")
    if method == "UploadConstants":
        parts.append(f"{len(request.constants)} constants, "
                     f"{sum(c.data.byte_size for c in request.constants)} B through shared memory")
    elif method == "QueryConstants":
        parts.append(f"{len(request.hashes)} hashes"
                     + (f", {len(response.missing)} missing" if response is not None else ""))
    elif method == "Compile":
        if response is not None and response.missing_constants:
            outcome = f", {len(response.missing_constants)} weights to upload first"
        elif response is not None:
            outcome = f", handle {response.handle}, cache_hit={response.cache_hit}"
        else:
            outcome = ""
        parts.append(f"{len(request.graph.nodes)} nodes{outcome}")
    elif method == "Execute":
        parts.append(f"{len(request.inputs)} inputs, {len(request.outputs)} outputs, "
                     f"{sum(d.byte_size for d in (*request.inputs, *request.outputs))} B "
                     "through shared memory")
    elif method == "RegisterRegion":
        parts.append(f"region of {request.byte_size} B")
    return "; ".join(parts)


def _logged(method: str, call: Callable[..., object]) -> Callable[..., object]:
    def logged_call(request: object, *args: object, **kwargs: object) -> object:
        if not rpc_log.isEnabledFor(logging.DEBUG):
            return call(request, *args, **kwargs)
        start = time.perf_counter()
        try:
            response = call(request, *args, **kwargs)
        except grpc.RpcError as e:
            rpc_log.debug("%s %.3f ms %s (%s): %s", method, (time.perf_counter() - start) * 1e3,
                          e.code().name, _summary(method, request, None), e.details())
            raise
        rpc_log.debug("%s %.3f ms OK (%s)", method, (time.perf_counter() - start) * 1e3,
                      _summary(method, request, response))
        return response
    logged_call.__name__ = method
    return logged_call


class LoggedStub:
    """The Kiln stub with each RPC logged to kiln.rpc at debug level (name,
    latency, status, what it carried). When debug is off a call costs one
    level check more than the bare stub's."""

    def __init__(self, stub: kiln_pb2_grpc.KilnStub):
        for method in kiln_pb2.DESCRIPTOR.services_by_name["Kiln"].methods:
            setattr(self, method.name, _logged(method.name, getattr(stub, method.name)))


class Connection:
    def __init__(self, socket_path: str, autostart: bool = True, cache_dir: str | None = None,
                 daemon_idle_min: float | None = None):
        self.socket_path = socket_path
        self.autostart = autostart
        # The cache directory asked for (options cache_dir): given to a
        # daemon this connection starts, and compared with a running one's.
        self.cache_dir = cache_dir
        # Options daemon_idle_min: a daemon this connection starts exits
        # after that many minutes unused (None: it stays up).
        self.daemon_idle_min = daemon_idle_min
        self.pid = os.getpid()
        self.generation = 0
        self.session_id = ""
        self.runtime_version = ""
        self._lock = threading.RLock()
        self._channel: grpc.Channel | None = None
        self._socket_dir: daemon.SocketDir | None = None
        self._stub: LoggedStub | None = None
        self._capabilities: kiln_pb2.CapabilitiesResponse | None = None
        self._local = threading.local()
        self._channels_ok = channel_mod.supported()
        self._present: set[str] = set()  # constant hashes the daemon holds
        # Handles of garbage-collected subgraphs, released on the next
        # flush (a finalizer must not make RPCs itself).
        self._dead_handles: list[tuple[int, int]] = []
        self._output_pool: output_pool_mod.OutputPool | None = None
        # The Hold call a daemon that cannot see this process asks for
        # (OpenSessionResponse.hold_required): open while the session is.
        self._hold: grpc.Future | None = None

    # ------------------------------------------------------------ session --

    def connect(self) -> None:
        """Ensures a daemon is running and opens a session (if none is open)."""
        with self._lock:
            if self._stub is None:
                self._open()

    def _open(self) -> None:
        # The checked socket directory (daemon.ensure_daemon): the channel
        # connects through it, so it stays open as long as the channel.
        socket_dir = daemon.ensure_daemon(self.socket_path, self.autostart,
                                          cache_dir=self.cache_dir,
                                          idle_min=self.daemon_idle_min)
        channel = daemon.open_channel(self.socket_path, options=_CHANNEL_OPTIONS,
                                      socket_dir=socket_dir)
        stub = LoggedStub(kiln_pb2_grpc.KilnStub(channel))
        try:
            response = stub.OpenSession(
                kiln_pb2.OpenSessionRequest(pid=os.getpid(), client_name="kiln-python",
                                            pid_namespace=_pid_namespace()),
                timeout=SMALL_CALL_TIMEOUT_S)
        except grpc.RpcError:
            channel.close()
            if socket_dir is not None:
                socket_dir.close()
            raise
        self._channel, self._stub, self._socket_dir = channel, stub, socket_dir
        self.session_id = response.session_id
        self.runtime_version = response.runtime_version
        if response.hold_required:
            # Another pid namespace: the daemon learns this process has gone
            # when this call's connection closes. Never read; the call runs
            # in gRPC's core, not in a thread of ours.
            self._hold = kiln_pb2_grpc.KilnStub(channel).Hold(
                kiln_pb2.HoldRequest(session_id=response.session_id))
            log.debug("session %s: holding it open (the daemon cannot watch this process)",
                      response.session_id)
        self._present = set()
        self.generation += 1
        log.debug("session %s opened on %s (generation %d)",
                  self.session_id, self.socket_path, self.generation)
        if self.cache_dir:
            try:
                running = stub.GetStats(kiln_pb2.StatsRequest(), timeout=SMALL_CALL_TIMEOUT_S)
                if os.path.realpath(running.cache_dir or "") != os.path.realpath(self.cache_dir):
                    log.warning("kiln: cache_dir %s asked for, but the daemon on %s (already "
                                "running) caches in %s", self.cache_dir, self.socket_path,
                                running.cache_dir or "nothing (caching off)")
            except grpc.RpcError:
                pass

    def reconnect(self, failed_generation: int) -> None:
        """Replaces a session lost in failed_generation (no-op if already replaced)."""
        with self._lock:
            if self.generation != failed_generation and self._stub is not None:
                return
            log.warning("kilnd on %s went away; reconnecting", self.socket_path)
            self._drop_channel()
            self._open()

    def _drop_channel(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            self._hold = None
        if self._channel is not None:
            self._channel.close()
        if self._socket_dir is not None:
            self._socket_dir.close()  # after the channel that connects through it
        self._channel = self._stub = self._socket_dir = None
        self.session_id = ""

    def close(self) -> None:
        """Closes the session (best effort) and the channel."""
        with self._lock:
            if self._stub is not None and self.pid == os.getpid():
                try:
                    self._stub.CloseSession(
                        kiln_pb2.CloseSessionRequest(session_id=self.session_id), timeout=1.0)
                except grpc.RpcError:
                    pass
            self._drop_channel()
            if self._output_pool is not None:
                self._output_pool.close()
                self._output_pool = None

    @property
    def stub(self) -> LoggedStub:
        self.connect()
        assert self._stub is not None
        return self._stub

    def call(self, method: str, request: object, timeout: float = SMALL_CALL_TIMEOUT_S,
             retry: bool = True):
        """One RPC with a deadline; on daemon loss, reconnects and retries once.

        Only for requests that do not depend on session state other than
        session_id (which is refreshed on retry).
        """
        generation = self.generation
        stub = self.stub
        try:
            if hasattr(request, "session_id"):
                request.session_id = self.session_id
            return getattr(stub, method)(request, timeout=timeout)
        except grpc.RpcError as e:
            if not (retry and is_daemon_lost(e)):
                raise
            self.reconnect(generation)
            if hasattr(request, "session_id"):
                request.session_id = self.session_id
            return getattr(self.stub, method)(request, timeout=timeout)

    def defer_release(self, generation: int, handle: int) -> None:
        """Queues a handle for release; safe to call from a finalizer."""
        self._dead_handles.append((generation, handle))

    def flush_releases(self) -> None:
        """Releases queued handles that belong to the current session."""
        while self._dead_handles:
            generation, handle = self._dead_handles.pop()
            if generation != self.generation or self._stub is None:
                continue
            try:
                self._stub.Release(
                    kiln_pb2.ReleaseRequest(session_id=self.session_id, handle=handle),
                    timeout=SMALL_CALL_TIMEOUT_S)
            except grpc.RpcError as e:
                log.debug("Release(%d) failed: %s", handle, e.details())

    # --------------------------------------------------------------- info --

    def capabilities(self) -> kiln_pb2.CapabilitiesResponse:
        with self._lock:
            if self._capabilities is None:
                self._capabilities = self.call("GetCapabilities", kiln_pb2.CapabilitiesRequest())
            return self._capabilities

    def stats(self) -> kiln_pb2.StatsResponse:
        return self.call("GetStats", kiln_pb2.StatsRequest())

    # ------------------------------------------------------ shared memory --

    def _register(self, name: str, byte_size: int, output_block: bool = False) -> int:
        response = self.stub.RegisterRegion(
            kiln_pb2.RegisterRegionRequest(session_id=self.session_id, name=name,
                                           byte_size=byte_size, output_block=output_block),
            timeout=SMALL_CALL_TIMEOUT_S)
        return response.region_id

    def _register_block(self, name: str, byte_size: int) -> int:
        return self._register(name, byte_size, output_block=True)

    def _unregister(self, region_id: int) -> None:
        try:
            self.stub.UnregisterRegion(
                kiln_pb2.UnregisterRegionRequest(session_id=self.session_id, region_id=region_id),
                timeout=SMALL_CALL_TIMEOUT_S)
        except grpc.RpcError as e:
            log.debug("UnregisterRegion(%d) failed: %s", region_id, e.details())

    def arena(self) -> shm.Arena:
        """This thread's arena, registered in the current generation."""
        self.connect()
        arena = getattr(self._local, "arena", None)
        if arena is None or arena.generation != self.generation:
            if arena is not None:
                arena.close()  # its region died with the old session
            arena = shm.Arena(self._register, self._unregister, self.generation)
            self._local.arena = arena
        return arena

    def output_pool(self) -> output_pool_mod.OutputPool:
        """The blocks large outputs are returned in, for the current
        generation (shared by this connection's threads)."""
        self.connect()
        with self._lock:
            pool = self._output_pool
            if pool is None or pool.generation != self.generation:
                if pool is not None:
                    pool.close()  # its blocks died with the old session
                pool = output_pool_mod.OutputPool(self._register_block, self._unregister,
                                                  self.generation)
                self._output_pool = pool
            return pool

    def live_output_pool(self) -> output_pool_mod.OutputPool | None:
        """The current generation's output pool if it has one (none made)."""
        pool = self._output_pool
        return pool if pool is not None and pool.generation == self.generation else None

    def channel(self) -> channel_mod.Channel | None:
        """This thread's call channel in the current generation, or None
        when channels are off or the daemon does not offer them."""
        if not self._channels_ok:
            return None
        self.connect()
        chan = getattr(self._local, "channel", None)
        if chan is not None and (chan.generation != self.generation or chan.closed):
            chan.close()
            chan = self._local.channel = None
        if chan is None:
            try:
                chan = channel_mod.Channel(self._register, self._open_channel, self.alive,
                                           self.generation)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                log.info("kilnd on %s has no call channels; executing over gRPC",
                         self.socket_path)
                self._channels_ok = False
                return None
            self._local.channel = chan
        return chan

    def discard_thread_state(self) -> None:
        """Drops this thread's channel and arena (after an abandoned call,
        which may still be using them in the daemon)."""
        for name in ("channel", "arena"):
            obj = getattr(self._local, name, None)
            if obj is not None:
                setattr(self._local, name, None)
                if name == "channel" and obj.generation == self.generation:
                    try:
                        self.stub.CloseChannel(
                            kiln_pb2.CloseChannelRequest(session_id=self.session_id,
                                                         channel_id=obj.channel_id),
                            timeout=SMALL_CALL_TIMEOUT_S)
                    except grpc.RpcError as e:
                        log.debug("CloseChannel failed: %s", e.details())

    def _open_channel(self, region_id: int) -> tuple[int, int]:
        response = self.stub.OpenChannel(
            kiln_pb2.OpenChannelRequest(session_id=self.session_id, region_id=region_id),
            timeout=SMALL_CALL_TIMEOUT_S)
        return response.channel_id, response.max_tensors

    def alive(self) -> bool:
        """Whether the daemon still answers (for callers waiting on it)."""
        stub = self._stub
        if stub is None:
            return False
        try:
            stub.GetStats(kiln_pb2.StatsRequest(), timeout=SMALL_CALL_TIMEOUT_S)
            return True
        except grpc.RpcError as e:
            return not is_daemon_lost(e) and e.code() != grpc.StatusCode.DEADLINE_EXCEEDED

    # ---------------------------------------------------------- constants --

    def ensure_constants(self, constants: Mapping[str, torch.Tensor]) -> ConstantTransfer:
        """Makes sure the daemon holds every constant (hash -> tensor);
        returns what that took (what was uploaded, what it already held).

        Raises grpc.RpcError as the daemon reports it (the caller decides
        whether to reconnect).
        """
        transfer = ConstantTransfer()
        with self._lock:
            wanted = [h for h in constants if h not in self._present]
            missing: list[str] = []
            if wanted:
                response = self.stub.QueryConstants(
                    kiln_pb2.QueryConstantsRequest(session_id=self.session_id, hashes=wanted),
                    timeout=SMALL_CALL_TIMEOUT_S)
                missing = list(dict.fromkeys(response.missing))
            batch: list[str] = []
            batch_bytes = 0
            for h in missing:
                size = shm.align(constants[h].numel() * constants[h].element_size())
                if batch and batch_bytes + size > UPLOAD_BATCH_BYTES:
                    self._upload(batch, constants)
                    batch, batch_bytes = [], 0
                batch.append(h)
                batch_bytes += size
            if batch:
                self._upload(batch, constants)
            self._present.update(wanted)
        uploaded = set(missing)
        for h, t in constants.items():
            nbytes = t.numel() * t.element_size()
            if h in uploaded:
                transfer.uploaded += 1
                transfer.uploaded_bytes += nbytes
            else:
                transfer.reused += 1
                transfer.reused_bytes += nbytes
        return transfer

    def forget_constants(self, hashes) -> None:
        """Stops assuming the daemon holds these constants (it drops those no
        compiled graph uses after a grace period); the next
        ensure_constants asks again."""
        with self._lock:
            self._present.difference_update(hashes)

    def _upload(self, hashes: list[str], constants: Mapping[str, torch.Tensor]) -> None:
        total = sum(shm.align(constants[h].numel() * constants[h].element_size()) for h in hashes)
        region = shm.Region(max(total, shm.ALIGNMENT), self._register)
        try:
            request = kiln_pb2.UploadConstantsRequest(session_id=self.session_id)
            offset = 0
            for h in hashes:
                t = constants[h].detach()
                request.constants.append(
                    kiln_pb2.ConstantUpload(hash=h, data=region.write(offset, t)))
                offset += shm.align(t.numel() * t.element_size())
            self.stub.UploadConstants(request, timeout=UPLOAD_TIMEOUT_S)
        finally:
            self._unregister(region.region_id)
            region.close()


_connections: dict[tuple[str, bool], Connection] = {}
_connections_lock = threading.Lock()


def get_connection(socket_path: str | None = None, autostart: bool = True,
                   cache_dir: str | None = None,
                   daemon_idle_min: float | None = None) -> Connection:
    """The process-wide connection for a socket (default socket if None).

    cache_dir and daemon_idle_min only matter for the first connection to a
    socket (they are given to a daemon that connection starts)."""
    path = socket_path or daemon.default_socket_path()
    key = (path, autostart)
    with _connections_lock:
        conn = _connections.get(key)
        if conn is None or conn.pid != os.getpid():
            # A connection inherited over fork() is unusable in the child.
            conn = Connection(path, autostart, cache_dir, daemon_idle_min)
            _connections[key] = conn
        return conn


@atexit.register
def _close_all() -> None:
    for conn in list(_connections.values()):
        if conn.pid == os.getpid():
            conn.close()
