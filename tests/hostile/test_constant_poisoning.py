"""Point 1: a constant cannot be stored under another content's hash.

The client uploads weights A under SHA-256(A) while a second thread flips
the first page of the shared memory between A and other bytes. Whatever
the interleaving, the upload is either refused (the bytes the daemon read
do not hash to the key) or the daemon stores exactly A: read back through
a compiled graph, the stored constant equals A.
"""
from __future__ import annotations

import threading

import grpc
import torch

from conftest import call, graph, sha256_hex
from kiln import shm
from kiln.v1 import kiln_pb2

ELEMENTS = 4 << 20  # 16 MiB of f32
PAGE = 1024         # f32 elements in a page


def _read_back(client, digest: str, region) -> torch.Tensor:
    """The stored constant, through a graph that returns relu(constant)."""
    node = kiln_pb2.Node(name="w")
    node.constant.hash = digest
    node.constant.meta.CopyFrom(shm.tensor_meta(torch.float32, (ELEMENTS,)))
    handle = client.compile(graph([node, call("relu", "aten.relu.default", 0)], [1])).handle
    client.execute(handle, [], [region.descriptor(0, torch.float32, (ELEMENTS,))])
    return region.view(0, torch.float32, (ELEMENTS,)).clone()


def test_bytes_flipped_during_upload_are_refused_or_stored_as_their_hash_says(
        kilnd, bystander, hostile):
    region = hostile.region(ELEMENTS * 4)
    readback = hostile.region(ELEMENTS * 4)
    view = region.view(0, torch.float32, (ELEMENTS,))
    stored = refused = 0
    for attempt in range(20):
        value = float(attempt + 1)
        weight = torch.full((ELEMENTS,), value)
        digest = sha256_hex(weight)
        desc = region.write(0, weight)
        stop = threading.Event()

        def flip():
            page = view[:PAGE]
            while not stop.is_set():
                page.fill_(-value)
                page.fill_(value)

        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            hostile.upload([(digest, desc)])
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
            assert "do not match their hash" in e.details(), e.details()
            refused += 1
            continue
        finally:
            stop.set()
            flipper.join()
        # relu: the flipped (negative) values would read back as zeros.
        assert torch.equal(_read_back(hostile, digest, readback), weight), (
            f"attempt {attempt}: the daemon stored bytes that are not the content of {digest}")
        stored += 1
    assert stored + refused == 20
