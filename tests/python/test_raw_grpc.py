"""Malformed requests straight through the generated stubs.

Each must get INVALID_ARGUMENT, and the daemon must keep serving
well-formed requests afterwards.
"""
from __future__ import annotations

import grpc
import pytest
import torch

from kiln import daemon, shm
from kiln.v1 import kiln_pb2, kiln_pb2_grpc

F32 = kiln_pb2.FLOAT32


def _meta(shape):
    return shm.tensor_meta(torch.float32, shape)


def _placeholder(name, shape):
    node = kiln_pb2.Node(name=name)
    node.placeholder.meta.CopyFrom(_meta(shape))
    return node


def _call(name, target, *refs):
    node = kiln_pb2.Node(name=name)
    node.call.target = target
    for ref in refs:
        node.call.args.append(kiln_pb2.Argument(node=kiln_pb2.NodeRef(node=ref)))
    return node


def _relu_graph(shape=(4, 4)):
    g = kiln_pb2.Graph(nodes=[_placeholder("x", shape), _call("relu", "aten.relu.default", 0)])
    g.outputs.append(kiln_pb2.NodeRef(node=1))
    return g


class Client:
    def __init__(self, socket_path):
        self.channel = grpc.insecure_channel(daemon.target_for(socket_path))
        self.stub = kiln_pb2_grpc.KilnStub(self.channel)
        self.session = self.stub.OpenSession(
            kiln_pb2.OpenSessionRequest(pid=0, client_name="raw-test"), timeout=10).session_id
        self.region = shm.Region(4096, self._register)

    def _register(self, name, size):
        return self.stub.RegisterRegion(kiln_pb2.RegisterRegionRequest(
            session_id=self.session, name=name, byte_size=size), timeout=10).region_id

    def compile(self, graph):
        return self.stub.Compile(kiln_pb2.CompileRequest(session_id=self.session, graph=graph),
                                 timeout=60)

    def execute(self, handle, inputs, outputs):
        return self.stub.Execute(kiln_pb2.ExecuteRequest(
            session_id=self.session, handle=handle, inputs=inputs, outputs=outputs), timeout=60)

    def check_still_serving(self):
        """A well-formed compile + execute gives relu's answer."""
        handle = self.compile(_relu_graph()).handle
        x = torch.randn(4, 4)
        inp = self.region.write(0, x)
        out = self.region.descriptor(1024, torch.float32, (4, 4))
        self.execute(handle, [inp], [out])
        assert torch.equal(self.region.view(1024, torch.float32, (4, 4)), torch.relu(x))

    def close(self):
        self.region.close()
        self.channel.close()


@pytest.fixture
def client(daemon_up):
    c = Client(daemon_up.socket)
    yield c
    c.close()


def _assert_invalid(call, *words):
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (
        info.value.code(), info.value.details())
    for word in words:
        assert word in info.value.details(), info.value.details()


def test_unknown_op_is_invalid_argument(client):
    g = kiln_pb2.Graph(nodes=[_placeholder("x", (4, 4)),
                              _call("mystery", "aten.no_such_op_xyz.default", 0)])
    g.outputs.append(kiln_pb2.NodeRef(node=1))
    _assert_invalid(lambda: client.compile(g), "mystery")
    client.check_still_serving()


def test_dangling_node_reference_is_invalid_argument(client):
    g = kiln_pb2.Graph(nodes=[_placeholder("x", (4, 4)), _call("relu", "aten.relu.default", 7)])
    g.outputs.append(kiln_pb2.NodeRef(node=1))
    _assert_invalid(lambda: client.compile(g), "relu")
    client.check_still_serving()


def test_forward_reference_is_invalid_argument(client):
    g = kiln_pb2.Graph(nodes=[_placeholder("x", (4, 4)), _call("relu", "aten.relu.default", 1)])
    g.outputs.append(kiln_pb2.NodeRef(node=1))
    _assert_invalid(lambda: client.compile(g), "relu")
    client.check_still_serving()


def test_dangling_output_reference_is_invalid_argument(client):
    g = _relu_graph()
    g.outputs[0].node = 9
    _assert_invalid(lambda: client.compile(g))
    client.check_still_serving()


def test_input_descriptor_past_region_end_is_invalid_argument(client):
    handle = client.compile(_relu_graph()).handle
    inp = client.region.descriptor(4096 - 32, torch.float32, (4, 4))  # 64 bytes from 4064
    out = client.region.descriptor(0, torch.float32, (4, 4))
    _assert_invalid(lambda: client.execute(handle, [inp], [out]))
    client.check_still_serving()


def test_output_descriptor_past_region_end_is_invalid_argument(client):
    handle = client.compile(_relu_graph()).handle
    inp = client.region.write(0, torch.randn(4, 4))
    out = client.region.descriptor(1 << 40, torch.float32, (4, 4))  # far beyond, no overflow
    _assert_invalid(lambda: client.execute(handle, [inp], [out]))
    client.check_still_serving()


def test_descriptor_offset_overflow_is_invalid_argument(client):
    handle = client.compile(_relu_graph()).handle
    inp = client.region.descriptor(0, torch.float32, (4, 4))
    inp.offset = (1 << 64) - 16  # offset + byte_size wraps around
    out = client.region.descriptor(1024, torch.float32, (4, 4))
    _assert_invalid(lambda: client.execute(handle, [inp], [out]))
    client.check_still_serving()


def test_region_name_outside_dev_shm_pattern_is_rejected(client):
    with pytest.raises(grpc.RpcError) as info:
        client.stub.RegisterRegion(kiln_pb2.RegisterRegionRequest(
            session_id=client.session, name="../etc/passwd", byte_size=4096), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    client.check_still_serving()


def _status_of(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _hostile_requests(client, other):
    """(description, call, expected codes) for requests a buggy or hostile
    client could send; each must fail with a clear status."""
    huge = kiln_pb2.Graph(nodes=[_placeholder("x", (1 << 40, 1 << 40)),
                                 _call("relu", "aten.relu.default", 0)])
    huge.outputs.append(kiln_pb2.NodeRef(node=1))
    negative = kiln_pb2.Graph(nodes=[_placeholder("x", (4, -3)),
                                     _call("relu", "aten.relu.default", 0)])
    negative.outputs.append(kiln_pb2.NodeRef(node=1))
    cycle = kiln_pb2.Graph(nodes=[_placeholder("x", (4,)),
                                  _call("a", "aten.add.Tensor", 0, 2),
                                  _call("b", "aten.relu.default", 1)])
    cycle.outputs.append(kiln_pb2.NodeRef(node=2))
    self_ref = kiln_pb2.Graph(nodes=[_placeholder("x", (4,)), _call("me", "aten.relu.default", 1)])
    self_ref.outputs.append(kiln_pb2.NodeRef(node=1))
    wrong_type = kiln_pb2.Graph(nodes=[_placeholder("x", (4,))])
    node = kiln_pb2.Node(name="relu")
    node.call.target = "aten.relu.default"
    node.call.args.append(kiln_pb2.Argument(str_value="not a tensor"))
    wrong_type.nodes.append(node)
    wrong_type.outputs.append(kiln_pb2.NodeRef(node=1))
    unknown_constant = kiln_pb2.Graph(nodes=[_placeholder("x", (4,))])
    const = kiln_pb2.Node(name="w")
    const.constant.hash = "ab" * 32
    const.constant.meta.CopyFrom(_meta((4,)))
    unknown_constant.nodes.append(const)
    unknown_constant.nodes.append(_call("add", "aten.add.Tensor", 0, 1))
    unknown_constant.outputs.append(kiln_pb2.NodeRef(node=2))
    # Handles are numbered per session: one this client does not hold.
    for _ in range(20):
        theirs = other.compile(_relu_graph()).handle
    inp = client.region.descriptor(0, torch.float32, (4, 4))
    out = client.region.descriptor(1024, torch.float32, (4, 4))
    bad_meta = kiln_pb2.TensorDescriptor(region_id=client.region.region_id, offset=0,
                                         byte_size=64)
    bad_meta.meta.dtype = 77  # no such dtype
    bad_meta.meta.shape.extend([4, 4])
    mine = client.compile(_relu_graph()).handle
    invalid = {grpc.StatusCode.INVALID_ARGUMENT}
    return [
        ("huge shape", lambda: client.compile(huge), invalid | {grpc.StatusCode.RESOURCE_EXHAUSTED}),
        ("negative size", lambda: client.compile(negative), invalid),
        ("cycle", lambda: client.compile(cycle), invalid),
        ("self reference", lambda: client.compile(self_ref), invalid),
        ("argument of the wrong type", lambda: client.compile(wrong_type), invalid),
        ("unknown constant", lambda: client.compile(unknown_constant),
         {grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}),
        ("another client's handle", lambda: client.execute(theirs, [inp], [out]),
         {grpc.StatusCode.NOT_FOUND}),
        ("unknown dtype", lambda: client.execute(mine, [bad_meta], [out]), invalid),
        ("negative region size", lambda: client.stub.RegisterRegion(
            kiln_pb2.RegisterRegionRequest(session_id=client.session, name=client.region.name,
                                           byte_size=-1 & 0xFFFFFFFFFFFFFFFF), timeout=10),
         invalid | {grpc.StatusCode.NOT_FOUND}),
        ("another process's region", lambda: client.stub.RegisterRegion(
            kiln_pb2.RegisterRegionRequest(session_id=client.session,
                                           name="kiln-1-someone-else", byte_size=4096),
            timeout=10), invalid),
        ("unknown session", lambda: client.stub.Compile(
            kiln_pb2.CompileRequest(session_id="0" * 32, graph=_relu_graph()), timeout=10),
         {grpc.StatusCode.NOT_FOUND}),
    ]


def test_hostile_requests_get_clear_statuses_while_another_client_is_served(daemon_up):
    """Every malformed request gets its status, with a message, while a
    well-behaved client in another thread keeps getting right answers."""
    import threading
    client, other, bystander = (Client(daemon_up.socket) for _ in range(3))
    stop = threading.Event()
    served, failures = [0], []

    def well_behaved():
        try:
            while not stop.is_set():
                bystander.check_still_serving()
                served[0] += 1
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    thread = threading.Thread(target=well_behaved)
    thread.start()
    try:
        results = []
        for _ in range(3):
            for what, call, expected in _hostile_requests(client, other):
                code, details = _status_of(call)
                results.append((what, code, details))
                assert code in expected, (what, code, details)
                assert details, what
    finally:
        stop.set()
        thread.join()
        for c in (client, other, bystander):
            c.close()
    assert not failures, failures
    assert served[0] > 0
    client_again = Client(daemon_up.socket)
    try:
        client_again.check_still_serving()
    finally:
        client_again.close()
