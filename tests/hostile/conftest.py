"""Fixtures for the hostile-client suite: a real kilnd per test, raw gRPC
clients that lie, race and shrink their memory, and a bystander client that
must not notice.

Every test gets a daemon of its own (a crash in one test must not fail the
next), and at the end of every test the daemon must still be running and
the bystander, a well-behaved client that compiled and ran a graph before
the test began, must get the right answer again.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import resource
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Sequence

import grpc
import pytest
import torch

from kiln import daemon, shm
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # the shared helpers: tests/testing/

from testing.daemons import Kilnd  # noqa: E402
from testing.shared_memory import assert_none_left_behind  # noqa: E402


def address_space_limit(limit: int):
    """A preexec_fn capping the child's address space (RLIMIT_AS), so a
    daemon that allocates without bound fails fast instead of taking the
    machine's memory."""
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return apply


def f32(shape: Sequence[int]) -> kiln_pb2.TensorMeta:
    return shm.tensor_meta(torch.float32, shape)


def placeholder(name: str, meta: kiln_pb2.TensorMeta) -> kiln_pb2.Node:
    node = kiln_pb2.Node(name=name)
    node.placeholder.meta.CopyFrom(meta)
    return node


def call(name: str, target: str, *args: object) -> kiln_pb2.Node:
    """A call node; an int argument is a reference to that node, a
    kiln_pb2.Argument is taken as it is."""
    node = kiln_pb2.Node(name=name)
    node.call.target = target
    for arg in args:
        if isinstance(arg, kiln_pb2.Argument):
            node.call.args.append(arg)
        else:
            node.call.args.append(kiln_pb2.Argument(node=kiln_pb2.NodeRef(node=arg)))
    return node


def graph(nodes: Sequence[kiln_pb2.Node], outputs: Sequence[int]) -> kiln_pb2.Graph:
    g = kiln_pb2.Graph(nodes=list(nodes))
    for i in outputs:
        g.outputs.append(kiln_pb2.NodeRef(node=i))
    return g


def relu_graph(shape: Sequence[int] = (4, 4)) -> kiln_pb2.Graph:
    return graph([placeholder("x", f32(shape)), call("relu", "aten.relu.default", 0)], [1])


class RawRegion:
    """A /dev/shm object the test keeps full control of: its file
    descriptor stays open (to truncate it, write through it, register it
    again) and its name stays in /dev/shm until close()."""

    def __init__(self, client: "RawClient", byte_size: int, register: bool = True):
        self.client = client
        self.byte_size = byte_size
        self.name = f"kiln-{os.getpid()}-{secrets.token_hex(8)}"
        self.path = f"/dev/shm/{self.name}"
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(self.fd, byte_size)
        self.map = mmap.mmap(self.fd, byte_size, flags=mmap.MAP_SHARED)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.region_id = 0
        if register:
            try:
                self.register()
            except BaseException:
                # A refused registration (the tests of the daemon's caps)
                # must not leave the object behind in /dev/shm.
                self.close()
                raise

    def register(self) -> int:
        """Registers the object (again: each call maps it once more)."""
        self.region_id = self.client.register(self.name, self.byte_size)
        return self.region_id

    def view(self, offset: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
        n = shm.nbytes(dtype, shape)
        return self.bytes[offset:offset + n].view(dtype).view(list(shape))

    def write(self, offset: int, tensor: torch.Tensor) -> kiln_pb2.TensorDescriptor:
        self.view(offset, tensor.dtype, tensor.shape).copy_(tensor)
        return self.descriptor(offset, tensor.dtype, tensor.shape)

    def descriptor(self, offset: int, dtype: torch.dtype,
                   shape: Sequence[int]) -> kiln_pb2.TensorDescriptor:
        return kiln_pb2.TensorDescriptor(region_id=self.region_id, offset=offset,
                                         byte_size=shm.nbytes(dtype, shape),
                                         meta=shm.tensor_meta(dtype, shape))

    def truncate(self, byte_size: int) -> None:
        """Shrinks (or grows) the object under every mapping of it."""
        os.ftruncate(self.fd, byte_size)

    def close(self) -> None:
        self.bytes = None
        try:
            self.map.close()
        except (BufferError, ValueError):
            pass
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class RawClient:
    """A client speaking the wire protocol through the generated stubs,
    with nothing of kiln's client library between it and the daemon."""

    def __init__(self, socket_path: str, name: str = "hostile", pid: int | None = None,
                 pid_namespace: int | None = None):
        self.channel = grpc.insecure_channel(daemon.target_for(socket_path))
        self.stub = kiln_pb2_grpc.KilnStub(self.channel)
        if pid_namespace is None:
            pid_namespace = os.stat("/proc/self/ns/pid").st_ino
        self.session = self.stub.OpenSession(kiln_pb2.OpenSessionRequest(
            pid=os.getpid() if pid is None else pid, client_name=name,
            pid_namespace=pid_namespace), timeout=10).session_id
        self.regions: list[RawRegion] = []

    def register(self, name: str, byte_size: int) -> int:
        return self.stub.RegisterRegion(kiln_pb2.RegisterRegionRequest(
            session_id=self.session, name=name, byte_size=byte_size), timeout=10).region_id

    def unregister(self, region_id: int) -> None:
        self.stub.UnregisterRegion(kiln_pb2.UnregisterRegionRequest(
            session_id=self.session, region_id=region_id), timeout=10)

    def region(self, byte_size: int, register: bool = True) -> RawRegion:
        r = RawRegion(self, byte_size, register)
        self.regions.append(r)
        return r

    def compile(self, g: kiln_pb2.Graph, timeout: float = 120) -> kiln_pb2.CompileResponse:
        return self.stub.Compile(kiln_pb2.CompileRequest(session_id=self.session, graph=g),
                                 timeout=timeout)

    def execute(self, handle: int, inputs, outputs, timeout: float = 60):
        return self.stub.Execute(kiln_pb2.ExecuteRequest(
            session_id=self.session, handle=handle, inputs=list(inputs), outputs=list(outputs)),
            timeout=timeout)

    def upload(self, constants: Sequence[tuple[str, kiln_pb2.TensorDescriptor]],
               timeout: float = 300) -> kiln_pb2.UploadConstantsResponse:
        return self.stub.UploadConstants(kiln_pb2.UploadConstantsRequest(
            session_id=self.session,
            constants=[kiln_pb2.ConstantUpload(hash=h, data=d) for h, d in constants]),
            timeout=timeout)

    def close(self) -> None:
        for r in self.regions:
            r.close()
        try:
            self.stub.CloseSession(kiln_pb2.CloseSessionRequest(session_id=self.session),
                                   timeout=5)
        except grpc.RpcError:
            pass
        self.channel.close()


def open_channel(client: RawClient):
    """A call channel of `client` (kiln's own Channel over the client's
    session): raises the daemon's RpcError when it is refused."""
    from kiln import channel as channel_mod

    def open_fn(region_id):
        r = client.stub.OpenChannel(kiln_pb2.OpenChannelRequest(
            session_id=client.session, region_id=region_id), timeout=10)
        return r.channel_id, r.max_tensors
    return channel_mod.Channel(client.register, open_fn, lambda: True, generation=0)


def sha256_hex(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()


class Bystander:
    """A well-behaved client: compiled relu before the attack, and runs it
    (over the Execute RPC) whenever asked; its answer must stay right."""

    def __init__(self, socket_path: str):
        self.client = RawClient(socket_path, name="bystander")
        self.region = self.client.region(1 << 16)
        self.handle = self.client.compile(relu_graph((64, 64))).handle
        self.check()

    def check(self) -> None:
        x = torch.randn(64, 64)
        inp = self.region.write(0, x)
        out = self.region.descriptor(32768, torch.float32, (64, 64))
        self.client.execute(self.handle, [inp], [out], timeout=30)
        assert torch.equal(self.region.view(32768, torch.float32, (64, 64)), torch.relu(x))

    def close(self) -> None:
        self.client.close()


def daemon_args(request) -> list[str]:
    """Extra kilnd flags a test asks for with @pytest.mark.kilnd_args(...)."""
    marker = request.node.get_closest_marker("kilnd_args")
    return list(marker.args) if marker else []


@pytest.fixture
def kilnd(request):
    """A daemon for this test only. At the end it must still be running,
    and the test's bystander (if it used one) must still be served."""
    workdir = tempfile.mkdtemp(prefix="kh-", dir="/tmp")
    limit = request.node.get_closest_marker("kilnd_address_space")
    d = Kilnd(workdir, daemon_args(request),
              preexec_fn=address_space_limit(limit.args[0]) if limit else None)
    d.start()
    try:
        yield d
        assert d.alive(), f"kilnd {d.exit_description()}; log:\n{d.log()}"
    finally:
        d.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_shared_memory_left_behind():
    """Whatever a test did (a refused registration included), it leaves no
    object of this process in /dev/shm: the last fixture to finish."""
    yield
    assert_none_left_behind()


@pytest.fixture
def bystander(kilnd):
    b = Bystander(kilnd.socket)
    yield b
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}; log:\n{kilnd.log()}"
    b.check()
    b.close()


@pytest.fixture
def hostile(kilnd):
    c = RawClient(kilnd.socket)
    yield c
    c.close()


def pytest_configure(config):
    config.addinivalue_line("markers", "kilnd_args(*flags): extra flags for the test's kilnd")
    config.addinivalue_line("markers",
                            "kilnd_address_space(bytes): RLIMIT_AS for the test's kilnd")
