"""Point 3: client memory that shrinks under the daemon.

A client truncates a /dev/shm object the daemon has mapped. Every path
that reads or writes client memory (a call channel's block, the data of a
channel call, Execute, UploadConstants) must survive the fault: the call
fails with INVALID_ARGUMENT saying the region shrank, the region stays
unusable, and the daemon and its other clients carry on.
"""
from __future__ import annotations

import struct
import time

import grpc
import pytest
import torch

from conftest import open_channel, relu_graph, sha256_hex
from kiln import channel as channel_mod
from kiln.channel_layout import _MAGIC, _VERSION, LAYOUT_VERSION, MAGIC
from kiln.v1 import kiln_pb2

SHAPE = (256, 256)
NBYTES = 256 * 256 * 4


def _assert_shrank(error: grpc.RpcError) -> None:
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert "shrank" in error.details(), error.details()


def _wait_for_log(kilnd, text: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in kilnd.log(400):
        assert kilnd.alive(), f"kilnd {kilnd.exit_description()}:\n{kilnd.log()}"
        assert time.monotonic() < deadline, f"no '{text}' in the log:\n{kilnd.log()}"
        time.sleep(0.05)


def test_execute_on_a_truncated_region_fails_that_call_only(kilnd, bystander, hostile):
    handle = hostile.compile(relu_graph(SHAPE)).handle
    region = hostile.region(2 * NBYTES)
    inp = region.write(0, torch.randn(SHAPE))
    out = region.descriptor(NBYTES, torch.float32, SHAPE)
    region.truncate(0)
    with pytest.raises(grpc.RpcError) as info:
        hostile.execute(handle, [inp], [out])
    _assert_shrank(info.value)
    # Broken for good, even grown back: its pages are no longer the object's.
    region.truncate(2 * NBYTES)
    with pytest.raises(grpc.RpcError) as info:
        hostile.execute(handle, [inp], [out])
    _assert_shrank(info.value)
    # A fresh region works.
    fresh = hostile.region(2 * NBYTES)
    x = torch.randn(SHAPE)
    hostile.execute(handle, [fresh.write(0, x)], [fresh.descriptor(NBYTES, torch.float32, SHAPE)])
    assert torch.equal(fresh.view(NBYTES, torch.float32, SHAPE), torch.relu(x))


def test_execute_writing_to_a_truncated_output_region_fails(kilnd, bystander, hostile):
    handle = hostile.compile(relu_graph(SHAPE)).handle
    inputs, outputs = hostile.region(NBYTES), hostile.region(NBYTES)
    inp = inputs.write(0, torch.randn(SHAPE))
    outputs.truncate(0)
    with pytest.raises(grpc.RpcError) as info:
        hostile.execute(handle, [inp], [outputs.descriptor(0, torch.float32, SHAPE)])
    _assert_shrank(info.value)


def test_upload_from_a_truncated_region_is_refused_and_stores_nothing(kilnd, bystander, hostile):
    weight = torch.randn(1 << 20)
    region = hostile.region(4 << 20)
    desc = region.write(0, weight)
    digest = sha256_hex(weight)
    region.truncate(4096)
    with pytest.raises(grpc.RpcError) as info:
        hostile.upload([(digest, desc)])
    _assert_shrank(info.value)
    missing = hostile.stub.QueryConstants(
        kiln_pb2.QueryConstantsRequest(session_id=hostile.session, hashes=[digest]),
        timeout=10).missing
    assert list(missing) == [digest]


def test_channel_block_truncated_while_served_stops_that_channel(kilnd, bystander, hostile):
    block = hostile.region(channel_mod.BLOCK_BYTES, register=False)
    struct.pack_into("<I", block.map, _MAGIC, MAGIC)
    struct.pack_into("<I", block.map, _VERSION, LAYOUT_VERSION)
    block.register()
    hostile.stub.OpenChannel(kiln_pb2.OpenChannelRequest(
        session_id=hostile.session, region_id=block.region_id), timeout=10)
    block.truncate(0)
    # The channel's thread watches its block's state word; the next look
    # faults, and the channel stops instead of the daemon.
    _wait_for_log(kilnd, f"region '{block.name}' shrank")
    bystander.check()


def test_channel_call_on_a_truncated_data_region_fails_that_call(kilnd, bystander, hostile):
    chan = open_channel(hostile)
    handle = hostile.compile(relu_graph(SHAPE)).handle
    data = hostile.region(2 * NBYTES)
    data.write(0, torch.randn(SHAPE))
    data.truncate(0)
    slots = channel_mod.pack_slots([(data.region_id, 0, NBYTES),
                                    (data.region_id, NBYTES, NBYTES)])
    with pytest.raises(channel_mod.ChannelError) as info:
        chan.call(handle, 1, 1, slots, 30.0, 0.0)
    _assert_shrank(info.value)
    # The channel itself still serves.
    fresh = hostile.region(2 * NBYTES)
    x = torch.randn(SHAPE)
    fresh.write(0, x)
    chan.call(handle, 1, 1, channel_mod.pack_slots([(fresh.region_id, 0, NBYTES),
                                                    (fresh.region_id, NBYTES, NBYTES)]),
              30.0, 0.0)
    assert torch.equal(fresh.view(NBYTES, torch.float32, SHAPE), torch.relu(x))
    chan.close()
