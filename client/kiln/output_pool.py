"""Shared-memory blocks that large outputs are computed into and handed
back as the output tensors' own memory.

Returning an output the ordinary way costs a fresh tensor and a copy out of
the arena: for a large output (a prefill's logits) faulting in the fresh
pages alone can take longer than some models take to run, and it grows
with the output. Outputs of at least MIN_BYTES instead get a
block of their own: the daemon writes the result there and the caller
receives a tensor over that memory (through a numpy array, whose lifetime
is the tensor storage's). When the last tensor on a block is freed, a
finalizer on that array returns the block to the pool, so a block is only
reused once nothing can see it: a returned tensor never changes under a
later call, as with copied outputs.

Such a tensor passed back as an input (a decode step's KV cache, the next
partition's activations) is not copied into the arena: the call's slot
points at its block, where the daemon reads it (locate()). The daemon only
reads inputs, and the block stays out of the pool while the caller holds the
tensor, so no call writes it meanwhile.

Blocks are Regions (shm.py) registered with the daemon like the arenas.
A pool belongs to one connection generation; after a reconnect the
connection starts a new one and blocks of the old one are simply dropped
when their tensors go. Thread-safe: finalizers run in whichever thread
frees the last reference.
"""
from __future__ import annotations

import logging
import mmap
import threading
import weakref
from typing import Sequence

import numpy as np
import torch

from kiln import shm

# Outputs below this size are copied: the numpy array and finalizer cost
# some microseconds a call, more than copying a small tensor.
MIN_BYTES = 1 << 20
# Free blocks kept per size class, and in all; blocks freed beyond either
# are unregistered. A decode step returns a KV cache tensor per layer and
# frees the previous step's: all of them come back for the next step.
# Besides, the last freed block larger than the whole budget is kept: an
# output that alone is larger (a prefill's logits over a large vocabulary)
# then comes back into the block of the call before last instead of
# hundreds of MB mapped and faulted in anew on every call.
KEEP_FREE = 16
KEEP_FREE_BYTES = 256 << 20
# Blocks come in sizes of 8 steps per power of two (at most 12.5% unused):
# an output that grows a little every call (a dynamic KV cache, one token
# longer each decode step) reuses the blocks of the last calls instead of
# creating, mapping and registering new ones on every call.
SIZE_STEPS = 8


def size_class(byte_size: int) -> int:
    """The block size that holds `byte_size` bytes."""
    pages = (byte_size + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
    step = max(mmap.PAGESIZE, (1 << (pages.bit_length() - 1)) // SIZE_STEPS)
    return (pages + step - 1) // step * step

_NUMPY = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
    torch.int64: np.int64, torch.int32: np.int32, torch.int16: np.int16,
    torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}

log = logging.getLogger(__name__)


def eligible(dtype: torch.dtype, shape: Sequence[int], contiguous: bool) -> bool:
    """Whether an output of this dtype and shape is handed back in a block:
    large, contiguous (eager's strides), and of a dtype numpy has."""
    return contiguous and dtype in _NUMPY and shm.nbytes(dtype, shape) >= MIN_BYTES


class OutputPool:
    def __init__(self, register: shm.RegisterFn, unregister: shm.UnregisterFn,
                 generation: int):
        self.generation = generation
        self._register = register
        self._unregister = unregister
        self._lock = threading.Lock()
        self._free: dict[int, list[shm.Region]] = {}
        self._free_bytes = 0
        self._large: shm.Region | None = None  # free, larger than KEEP_FREE_BYTES
        # Blocks handed out as tensors' memory, by address (locate()).
        self._live: dict[int, shm.Region] = {}
        self._retired: list[shm.Region] = []  # to unregister, in a caller's thread
        self._closed = False

    def acquire(self, byte_size: int) -> shm.Region:
        """A registered block of at least byte_size bytes, free for one call.
        Raises OSError when /dev/shm has no room for a new one."""
        size = size_class(byte_size)
        with self._lock:
            retired, self._retired = self._retired, []
            free = self._free.get(size)
            block = free.pop() if free else None
            if block is not None:
                self._free_bytes -= block.byte_size
            elif self._large is not None and self._large.byte_size == size:
                block, self._large = self._large, None
        for region in retired:
            self._unregister(region.region_id)
            region.close()
        return block if block is not None else shm.Region(size, self._register)

    def tensor(self, block: shm.Region, dtype: torch.dtype,
               shape: Sequence[int]) -> torch.Tensor:
        """The caller's output tensor over `block` (which it now owns until freed)."""
        count = 1
        for s in shape:
            count *= int(s)
        array = np.frombuffer(block.buffer(), dtype=_NUMPY[dtype], count=count)
        with self._lock:
            self._live[block.address] = block
        weakref.finalize(array, self._release, block)
        return torch.from_numpy(array).view(list(shape))

    def locate(self, t: torch.Tensor, nbytes: int) -> tuple[shm.Region, int] | None:
        """(block, offset) when `t`'s `nbytes` lie densely in a block this pool
        handed out, at an offset as aligned as an arena slot; else None."""
        base = t.untyped_storage().data_ptr()
        block = self._live.get(base)
        if block is None:
            return None
        offset = t.data_ptr() - base
        if offset % shm.ALIGNMENT or offset + nbytes > block.byte_size or not t.is_contiguous():
            return None
        return block, offset

    def give_back(self, block: shm.Region) -> None:
        """Returns a block no tensor was made over (the call failed before
        the daemon used it)."""
        self._release(block)

    def discard(self, block: shm.Region) -> None:
        """Drops a block a failed call may still be writing: never reused."""
        with self._lock:
            if not self._closed:
                self._retired.append(block)

    def close(self) -> None:
        """Ends the pool (its session is gone): free blocks are unmapped,
        blocks still in use are dropped when their tensors go."""
        with self._lock:
            self._closed = True
            free = [b for blocks in self._free.values() for b in blocks]
            if self._large is not None:
                free.append(self._large)
                self._large = None
            self._free.clear()
            self._free_bytes = 0
            self._retired.clear()
        for block in free:
            block.close()

    def _release(self, block: shm.Region) -> None:
        # A finalizer: runs while the array still holds its view of the
        # mapping, so nothing here may unmap or call the daemon.
        with self._lock:
            self._live.pop(block.address, None)
            if self._closed:
                return
            if block.byte_size > KEEP_FREE_BYTES:
                if self._large is not None:
                    self._retired.append(self._large)
                self._large = block
                return
            free = self._free.setdefault(block.byte_size, [])
            if len(free) < KEEP_FREE and self._free_bytes + block.byte_size <= KEEP_FREE_BYTES:
                free.append(block)
                self._free_bytes += block.byte_size
            else:
                self._retired.append(block)
