"""POSIX shared-memory regions and the per-thread arena tensors travel through.

A Region is a /dev/shm file the client creates, maps and registers with the
daemon, then unlinks at once: the mapping (ours and the daemon's) keeps the
memory alive, and nothing is left behind in /dev/shm if either process dies.

An Arena owns one region and grows it (registers a bigger one) when a call
needs more room; calls reuse it. An arena is not thread-safe: each thread
uses its own (see Connection.arena()).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import secrets
from typing import Callable, Sequence

import torch

from kiln import native
from kiln.v1 import kiln_pb2

ALIGNMENT = 64
MIN_REGION_BYTES = 1 << 20

_DTYPES = {
    torch.float32: kiln_pb2.FLOAT32,
    torch.float64: kiln_pb2.FLOAT64,
    torch.float16: kiln_pb2.FLOAT16,
    torch.bfloat16: kiln_pb2.BFLOAT16,
    torch.int64: kiln_pb2.INT64,
    torch.int32: kiln_pb2.INT32,
    torch.int16: kiln_pb2.INT16,
    torch.int8: kiln_pb2.INT8,
    torch.uint8: kiln_pb2.UINT8,
    torch.bool: kiln_pb2.BOOL,
    torch.complex64: kiln_pb2.COMPLEX64,
}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


def wire_dtype(dtype: torch.dtype) -> int:
    """The kiln.v1.DType of a torch dtype; KeyError if it has none."""
    return _DTYPES[dtype]


def torch_dtype(dtype: int) -> torch.dtype:
    return _TORCH_DTYPES[dtype]


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for size in reversed(list(shape)):
        strides.append(acc)
        acc *= max(int(size), 1)
    return strides[::-1]


def tensor_meta(dtype: torch.dtype, shape: Sequence[int]) -> kiln_pb2.TensorMeta:
    """A contiguous TensorMeta."""
    shape = [int(s) for s in shape]
    return kiln_pb2.TensorMeta(dtype=wire_dtype(dtype), shape=shape,
                               strides=contiguous_strides(shape))


def nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * torch.empty((), dtype=dtype).element_size()


def align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


# Registers a region with the daemon: (name, byte_size) -> region_id.
RegisterFn = Callable[[str, int], int]
UnregisterFn = Callable[[int], None]


_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


# Inputs from this size up go into shared memory with streaming stores
# (native.stream_copy): below it they may still be in a cache the daemon
# reads faster than memory.
STREAM_COPY_MIN_BYTES = 1 << 20


def copy_tensor(dst: torch.Tensor, src: torch.Tensor, stream: bool = False) -> None:
    """dst.copy_(src), with a plain memmove for dense same-dtype tensors
    (`stream`: dst is shared memory the daemon reads next; large copies then
    bypass the cache).

    Tensor.copy_ goes through PyTorch's OpenMP pool, whose threads then
    spin-wait for more work for a while; in the client that spinning takes
    a core from the daemon that is running the call (on 2 cores, resnet18's
    early convolutions ran at half speed)."""
    if (dst.dtype == src.dtype and dst.shape == src.shape and dst.is_contiguous()
            and src.is_contiguous() and src.device.type == "cpu"
            and not src.is_conj() and not src.is_neg()):
        nbytes = src.numel() * src.element_size()
        if stream and nbytes >= STREAM_COPY_MIN_BYTES and native.stream_copy is not None:
            native.stream_copy(dst.data_ptr(), src.data_ptr(), nbytes)
        else:
            ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
    else:
        dst.copy_(src)


class Region:
    """One mapped /dev/shm file, registered with the daemon as region_id."""

    def __init__(self, byte_size: int, register: RegisterFn):
        self.byte_size = byte_size
        self.name = f"kiln-{os.getpid()}-{secrets.token_hex(8)}"
        path = f"/dev/shm/{self.name}"
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            # Allocated, not just sized: on a full /dev/shm (a container's
            # default is 64 MiB) this fails here with ENOSPC instead of the
            # first touch of a missing page killing the process with SIGBUS.
            os.posix_fallocate(fd, 0, byte_size)
            # Populated up front: faulting in a large region page by page
            # (weights uploads are hundreds of MB) costs several times the
            # copy itself.
            self._mmap = mmap.mmap(fd, byte_size, flags=mmap.MAP_SHARED | _MAP_POPULATE)
        except BaseException:
            os.unlink(path)
            raise
        finally:
            os.close(fd)
        try:
            self.region_id = register(self.name, byte_size)
        finally:
            # The daemon has mapped it (or failed); either way the name is
            # no longer needed.
            os.unlink(path)
        # One uint8 tensor over the whole mapping; slices of it alias the
        # shared memory.
        self._bytes = torch.frombuffer(self._mmap, dtype=torch.uint8)
        self.address = self._bytes.data_ptr()

    def buffer(self) -> mmap.mmap:
        """The mapping, for views made outside torch (output_pool.py)."""
        return self._mmap

    def view(self, offset: int, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
        """A tensor aliasing the region at offset (valid while the region lives)."""
        size = nbytes(dtype, shape)
        return self._bytes[offset:offset + size].view(dtype).view(list(shape))

    def descriptor(self, offset: int, dtype: torch.dtype,
                   shape: Sequence[int]) -> kiln_pb2.TensorDescriptor:
        return kiln_pb2.TensorDescriptor(
            region_id=self.region_id, offset=offset,
            byte_size=nbytes(dtype, shape), meta=tensor_meta(dtype, shape))

    def write(self, offset: int, tensor: torch.Tensor) -> kiln_pb2.TensorDescriptor:
        """Copies tensor (any strides) contiguously to offset."""
        copy_tensor(self.view(offset, tensor.dtype, tensor.shape), tensor)
        return self.descriptor(offset, tensor.dtype, tensor.shape)

    def close(self) -> None:
        self._bytes = None
        try:
            self._mmap.close()
        except BufferError:
            # A view of it is still alive somewhere; the mapping goes with
            # the last reference.
            pass


class Arena:
    """A growable region reused across calls by one thread.

    `generation` is the connection generation the region was registered in;
    after a reconnect the region is unknown to the (new) daemon and is
    replaced on the next reserve().
    """

    def __init__(self, register: RegisterFn, unregister: UnregisterFn, generation: int):
        self._register = register
        self._unregister = unregister
        self.generation = generation
        self.region: Region | None = None

    def reserve(self, byte_size: int) -> Region:
        """The arena's region, grown to at least byte_size bytes."""
        if self.region is None or self.region.byte_size < byte_size:
            old = self.region
            size = max(MIN_REGION_BYTES, byte_size,
                       2 * old.byte_size if old else 0)
            size = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
            self.region = Region(size, self._register)
            if old is not None:
                try:
                    self._unregister(old.region_id)
                finally:
                    old.close()
        return self.region

    def close(self) -> None:
        if self.region is not None:
            self.region.close()
            self.region = None
