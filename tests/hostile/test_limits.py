"""Point 5: daemon-wide limits, and running out of memory or threads.

Clients open sessions, channels, regions and dynamic-shape graphs until
refused (small caps through kilnd's flags), send a graph of 2^20 nodes, and
make the daemon run out of address space in the middle of a compile and of
a channel's thread start. Each refusal is RESOURCE_EXHAUSTED naming the
flag, nothing else changes, and the daemon keeps serving everyone else.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import grpc
import pytest
import torch

from conftest import RawClient, call, f32, graph, open_channel, placeholder, relu_graph
from kiln.v1 import kiln_pb2


def _assert_exhausted(call_fn, *words: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call_fn()
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, (
        info.value.code(), info.value.details())
    for word in words:
        assert word in info.value.details(), info.value.details()


@pytest.mark.kilnd_args("--max-sessions", "6", "--max-client-sessions", "100")
def test_sessions_past_the_daemon_cap_are_refused(kilnd, bystander, hostile):
    clients = [RawClient(kilnd.socket) for _ in range(4)]  # with the two fixtures': 6
    _assert_exhausted(lambda: RawClient(kilnd.socket), "--max-sessions")
    clients.pop().close()
    clients.append(RawClient(kilnd.socket))  # a closed session's place is free again
    for c in clients:
        c.close()


@pytest.mark.kilnd_args("--max-client-sessions", "3")
def test_sessions_of_one_process_past_its_cap_are_refused(kilnd, bystander, hostile):
    third = RawClient(kilnd.socket)  # bystander, hostile and this one: one process
    _assert_exhausted(lambda: RawClient(kilnd.socket), "--max-client-sessions")
    # Another process is another client.
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from conftest import RawClient\n"
            "RawClient(%r).close(); print('opened')\n"
            % (os.path.dirname(__file__), kilnd.socket))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "opened" in out.stdout, out.stderr[-2000:]
    third.close()


@pytest.mark.kilnd_args("--max-channels", "3", "--max-client-channels", "2")
def test_channels_past_the_client_and_daemon_caps_are_refused(kilnd, bystander, hostile):
    mine = [open_channel(hostile), open_channel(hostile)]
    _assert_exhausted(lambda: open_channel(hostile), "--max-client-channels")
    other = RawClient(kilnd.socket)
    theirs = open_channel(other)  # the daemon's third
    _assert_exhausted(lambda: open_channel(other), "--max-channels")
    # Channels that are open still serve.
    handle = hostile.compile(relu_graph((8, 8))).handle
    data = hostile.region(4096)
    x = torch.randn(8, 8)
    data.write(0, x)
    mine[0].call(handle, 1, 1, _slots(data.region_id), 30.0, 0.0)
    assert torch.equal(data.view(256, torch.float32, (8, 8)), torch.relu(x))
    for chan in (*mine, theirs):
        chan.close()
    other.close()


def _slots(region_id: int) -> bytes:
    from kiln import channel as channel_mod
    return channel_mod.pack_slots([(region_id, 0, 256), (region_id, 256, 256)])


@pytest.mark.kilnd_args("--max-client-regions", "4")
def test_regions_past_the_client_cap_are_refused(kilnd, bystander, hostile):
    regions = [hostile.region(4096) for _ in range(4)]
    _assert_exhausted(lambda: hostile.region(4096), "--max-client-regions")
    hostile.unregister(regions[0].region_id)
    hostile.region(4096)


@pytest.mark.kilnd_args("--max-client-templates", "2")
def test_dynamic_shape_graphs_past_the_client_cap_are_refused(kilnd, bystander, hostile):
    def template(i):
        meta = kiln_pb2.TensorMeta(dtype=kiln_pb2.FLOAT32, shape=[-1, 4 + i])
        return graph([placeholder("x", meta), call("relu", "aten.relu.default", 0)], [1])

    kept = [hostile.compile(template(i)) for i in range(2)]
    assert all(r.dynamic for r in kept)
    _assert_exhausted(lambda: hostile.compile(template(2)), "--max-client-templates")
    # Static graphs are not templates: still compiled.
    hostile.compile(relu_graph((3, 3)))


def test_a_graph_of_a_million_nodes_is_refused(kilnd, bystander, hostile):
    # A chain of matrix products: every value an arena buffer, which the
    # memory planner places against every other one.
    n = 1 << 20
    nodes = [placeholder("x", f32((4, 4)))]
    nodes += [call(f"m{i}", "aten.mm.default", i, i) for i in range(n)]
    _assert_exhausted(lambda: hostile.compile(graph(nodes, [n]), timeout=120),
                      "--max-graph-nodes")


def _address_space(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


def test_running_out_of_memory_or_threads_fails_only_that_request(kilnd, bystander, hostile):
    # x + relu(full([16M], 1) + x[:1])[:4]: its first run allocates a 128 MiB
    # arena (the fill plus x read at run time, so nothing folds at compile).
    def i(v):
        return kiln_pb2.Argument(int_value=v)
    full = call("full", "aten.full.default",
                kiln_pb2.Argument(list=kiln_pb2.ArgumentList(items=[i(16 << 20)])),
                kiln_pb2.Argument(float_value=1.0))
    g = graph([placeholder("x", f32((4,))), full,
               call("first", "aten.slice.Tensor", 0, i(0), i(0), i(1)),
               call("big", "aten.add.Tensor", 1, 2), call("relu", "aten.relu.default", 3),
               call("slice", "aten.slice.Tensor", 4, i(0), i(0), i(4)),
               call("add", "aten.add.Tensor", 0, 5)], [6])
    handle = hostile.compile(g).handle
    region = hostile.region(4096)
    x = torch.randn(4)
    inp, out = region.write(0, x), region.descriptor(64, torch.float32, (4,))
    block_owner = RawClient(kilnd.socket)
    pid = kilnd.proc.pid
    unlimited = resource.prlimit(pid, resource.RLIMIT_AS)
    # Room for small allocations, none for the arena or a thread's stack.
    resource.prlimit(pid, resource.RLIMIT_AS, (_address_space(pid) + (4 << 20), unlimited[1]))
    try:
        _assert_exhausted(lambda: hostile.execute(handle, [inp], [out]), "out of memory")
        _assert_exhausted(lambda: open_channel(block_owner), "refused a resource")
    finally:
        resource.prlimit(pid, resource.RLIMIT_AS, unlimited)
    assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"
    # With memory back, the same requests succeed.
    hostile.execute(handle, [inp], [out])
    assert torch.equal(region.view(64, torch.float32, (4,)), x + torch.relu(1 + x[0]))
    open_channel(block_owner).close()
    block_owner.close()
