"""kiln/shm.py without a daemon: the layout tensors have in shared memory
(dtypes on the wire, strides, sizes, alignment) and a region's views and
descriptors. A region registers through the function it is given; here
that function only records the call."""
from __future__ import annotations

import os

import pytest
import torch

from kiln import shm
from kiln.v1 import kiln_pb2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool, torch.complex64])
def test_every_wire_dtype_maps_back_to_its_torch_dtype(dtype):
    assert shm.torch_dtype(shm.wire_dtype(dtype)) is dtype


def test_a_dtype_without_a_wire_form_is_a_key_error():
    with pytest.raises(KeyError):
        shm.wire_dtype(torch.complex128)


def test_contiguous_strides_match_torchs():
    for shape in [(2, 3, 4), (5,), (), (3, 0, 2), (1, 1, 7)]:
        assert shm.contiguous_strides(shape) == list(torch.empty(shape).stride()), shape


def test_sizes_and_alignment():
    assert shm.nbytes(torch.float32, (2, 3)) == 24
    assert shm.nbytes(torch.float16, (5,)) == 10
    assert shm.nbytes(torch.int64, ()) == 8
    assert shm.nbytes(torch.float32, (4, 0)) == 0
    assert [shm.align(n) for n in (0, 1, 64, 65, 128)] == [0, 64, 64, 128, 128]


def test_tensor_meta_is_contiguous():
    meta = shm.tensor_meta(torch.int32, [2, 5])
    assert (meta.dtype, list(meta.shape), list(meta.strides)) == (kiln_pb2.INT32, [2, 5], [5, 1])


def test_a_region_is_registered_by_name_and_leaves_no_file_behind():
    registered = []

    def register(name: str, size: int) -> int:
        assert os.path.exists(f"/dev/shm/{name}")  # the daemon opens it by name
        registered.append((name, size))
        return 42

    region = shm.Region(1 << 16, register)
    try:
        [(name, size)] = registered
        assert name.startswith(f"kiln-{os.getpid()}-")
        assert size == 1 << 16
        assert region.region_id == 42
        assert not os.path.exists(f"/dev/shm/{name}")
    finally:
        region.close()


def test_a_region_that_fails_to_register_leaves_no_file_behind():
    names = []

    def register(name: str, size: int) -> int:
        names.append(name)
        raise RuntimeError("refused")

    with pytest.raises(RuntimeError, match="refused"):
        shm.Region(4096, register)
    assert not os.path.exists(f"/dev/shm/{names[0]}")


def test_writes_land_where_views_and_descriptors_say():
    region = shm.Region(4096, lambda name, size: 7)
    try:
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
        desc = region.write(128, x)
        assert (desc.region_id, desc.offset, desc.byte_size) == (7, 128, 48)
        assert list(desc.meta.shape) == [4, 3] and list(desc.meta.strides) == [3, 1]
        torch.testing.assert_close(region.view(128, torch.float32, (4, 3)), x)
        # The same bytes, seen through the mapping as raw memory.
        raw = bytes(region.buffer()[128:128 + 48])
        assert raw == x.contiguous().numpy().tobytes()
    finally:
        region.close()


def test_an_arena_grows_by_registering_a_bigger_region():
    registered, unregistered = [], []

    def register(name: str, size: int) -> int:
        registered.append(size)
        return len(registered)

    arena = shm.Arena(register, unregistered.append, generation=0)
    try:
        first = arena.reserve(100)
        assert first.byte_size == shm.MIN_REGION_BYTES
        assert arena.reserve(shm.MIN_REGION_BYTES) is first
        second = arena.reserve(shm.MIN_REGION_BYTES + 1)
        assert second.byte_size == 2 * shm.MIN_REGION_BYTES
        assert unregistered == [first.region_id]
    finally:
        arena.close()
