"""Call channels: Execute through shared memory and a futex, not gRPC.

A gRPC call from Python costs a few hundred microseconds; posting a call
in a shared block and sleeping on a futex costs a few. Each client thread
that executes gets one channel (Connection.channel()): a small region laid
out as server/call_channel_layout.h describes (the offsets below mirror
it), served by a daemon thread of its own. The daemon checks a channel
call exactly like an Execute RPC.

Ordering: the request is written with plain stores and then published by
storing the state word; that is only safe where stores are not reordered
with one another (x86-64's total store order), so elsewhere the client
uses the Execute RPC. KILN_CALL_CHANNEL=0 does the same anywhere.

While a call runs the client sleeps on the state word, waking every
LIVENESS_CHECK_S to make sure the daemon is still there: a daemon killed
mid-call becomes an UNAVAILABLE error (the caller reconnects), never a
hang, and no output of a half-finished call is read.
"""
from __future__ import annotations

import ctypes
import logging
import os
import platform
import struct
import time
from typing import Callable

import grpc

from kiln import native, options, shm
from kiln.channel_layout import (  # server/call_channel_layout.h's numbers
    _CLOSED, _MAGIC, _REP_CODE, _REP_MSG, _REP_MSG_BYTES, _REP_RUN_US, _REP_SEQ, _REQ_FLAGS,
    _REQ_HANDLE, _REQ_INPUTS, _REQ_OUTPUTS, _REQ_SEQ, _STATE, _VERSION,
    FLAG_CLIENT_COMPUTES_NEXT, LAYOUT_VERSION, MAGIC, SLOT_BYTES, SLOTS_OFFSET, STATE_IDLE,
    STATE_REPLY, STATE_REQUEST, STATE_RUNNING)

BLOCK_BYTES = 64 << 10
# While waiting, how often to check the daemon is alive (and the deadline).
LIVENESS_CHECK_S = 0.25

_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1

_SLOT = struct.Struct("<QQQ")

log = logging.getLogger(__name__)


def supported() -> bool:
    """Whether this process may use channels (see the module doc)."""
    if not options.env_switch("KILN_CALL_CHANNEL"):
        return False
    return platform.machine() in ("x86_64", "AMD64") and os.path.exists("/dev/shm")


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
# ctypes releases the GIL around foreign calls: other threads run while
# this one sleeps in the kernel.
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long

_CODES = {code.value[0]: code for code in grpc.StatusCode}


class ChannelError(grpc.RpcError):
    """A failed channel call, shaped like the RpcError of an Execute RPC."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def pack_slots(slots: list[tuple[int, int, int]]) -> bytes:
    """The slot bytes of a call: (region_id, offset, byte_size) per tensor."""
    return b"".join(_SLOT.pack(*s) for s in slots)


class Channel:
    """One thread's channel. Not thread-safe (one caller at a time).

    `open_fn(region_id) -> (channel_id, max_tensors)` asks the daemon to
    serve the block; `alive_fn()` is False once the daemon is gone.
    """

    def __init__(self, register: shm.RegisterFn, open_fn: Callable[[int], tuple[int, int]],
                 alive_fn: Callable[[], bool], generation: int):
        self.generation = generation
        self._alive = alive_fn
        self.region = shm.Region(BLOCK_BYTES, register)
        base = self.region.address
        self._base = base
        self._state = ctypes.c_uint32.from_address(base + _STATE)
        self._closed = ctypes.c_uint32.from_address(base + _CLOSED)
        self._req_seq = ctypes.c_uint64.from_address(base + _REQ_SEQ)
        self._req_handle = ctypes.c_uint64.from_address(base + _REQ_HANDLE)
        self._req_inputs = ctypes.c_uint32.from_address(base + _REQ_INPUTS)
        self._req_outputs = ctypes.c_uint32.from_address(base + _REQ_OUTPUTS)
        self._req_flags = ctypes.c_uint32.from_address(base + _REQ_FLAGS)
        self._rep_seq = ctypes.c_uint64.from_address(base + _REP_SEQ)
        self._rep_code = ctypes.c_int32.from_address(base + _REP_CODE)
        self._rep_msg_bytes = ctypes.c_uint32.from_address(base + _REP_MSG_BYTES)
        self._rep_run_us = ctypes.c_double.from_address(base + _REP_RUN_US)
        ctypes.c_uint32.from_address(base + _MAGIC).value = MAGIC
        ctypes.c_uint32.from_address(base + _VERSION).value = LAYOUT_VERSION
        self._state.value = STATE_IDLE
        self._seq = 0
        self.channel_id, self.max_tensors = open_fn(self.region.region_id)
        self.last_run_us = 0.0

    def set_client_computes_next(self, on: bool) -> None:
        """Whether the next calls say the client computes right after them
        (eager nodes follow the partition): the daemon's threads then sleep
        after the run rather than spin on the cores the client needs. Kept
        in the block until changed; both call paths post it."""
        flags = FLAG_CLIENT_COMPUTES_NEXT if on else 0
        if self._req_flags.value != flags:
            self._req_flags.value = flags

    @property
    def closed(self) -> bool:
        return bool(self._closed.value)

    def call(self, handle: int, num_inputs: int, num_outputs: int, slots: bytes,
             timeout_s: float, spin_s: float = 0.0) -> float:
        """Runs one call; returns the daemon's run time in microseconds.

        Raises ChannelError with the daemon's status on failure,
        UNAVAILABLE if the daemon goes away, DEADLINE_EXCEEDED after
        timeout_s (the call may still complete in the daemon).

        At debug level each call is logged (this is the hot path: without
        debug it costs one level check).
        """
        if not log.isEnabledFor(logging.DEBUG):
            return self._call(handle, num_inputs, num_outputs, slots, timeout_s, spin_s)
        nbytes = sum(size for _, _, size in _SLOT.iter_unpack(slots))
        start = time.perf_counter()
        try:
            run_us = self._call(handle, num_inputs, num_outputs, slots, timeout_s, spin_s)
        except ChannelError as e:
            log.debug("channel %d call handle %d %.3f ms %s (%d inputs, %d outputs, %d B): %s",
                      self.channel_id, handle, (time.perf_counter() - start) * 1e3,
                      e.code().name, num_inputs, num_outputs, nbytes, e.details())
            raise
        log.debug("channel %d call handle %d %.3f ms OK (%d inputs, %d outputs, %d B; "
                  "daemon ran %.1f us)", self.channel_id, handle,
                  (time.perf_counter() - start) * 1e3, num_inputs, num_outputs, nbytes, run_us)
        return run_us

    def _call(self, handle: int, num_inputs: int, num_outputs: int, slots: bytes,
              timeout_s: float, spin_s: float) -> float:
        if num_inputs + num_outputs > self.max_tensors:
            raise ChannelError(grpc.StatusCode.INVALID_ARGUMENT,
                               f"{num_inputs + num_outputs} tensors; a channel call "
                               f"carries at most {self.max_tensors}")
        if self._closed.value:
            raise ChannelError(grpc.StatusCode.UNAVAILABLE, "the daemon closed the channel")
        state = self._state
        if state.value != STATE_IDLE:
            # Only after a call was abandoned (deadline): the owner must
            # replace the channel (and the arena the call may still use).
            raise ChannelError(grpc.StatusCode.FAILED_PRECONDITION,
                               "channel still busy with an abandoned call")
        self._seq += 1
        seq = self._seq
        self._req_seq.value = seq
        self._req_handle.value = handle
        self._req_inputs.value = num_inputs
        self._req_outputs.value = num_outputs
        ctypes.memmove(self._base + SLOTS_OFFSET, slots, len(slots))
        state.value = STATE_REQUEST  # publishes the request (see module doc)
        _syscall(_SYS_FUTEX, ctypes.c_void_p(self._base + _STATE), _FUTEX_WAKE, 1, None, None, 0)

        if spin_s > 0:
            end = time.perf_counter() + spin_s
            while state.value != STATE_REPLY and time.perf_counter() < end:
                pass
        if state.value != STATE_REPLY:
            self._wait_reply(time.monotonic() + timeout_s)
        return self._finish(seq)

    def call_native(self, args: tuple, plan: bytes, handle: int, num_tensors: int,
                    timeout_s: float, spin_s: float,
                    park: bool = False) -> tuple[list, bool] | None:
        """The call through native.channel_call: (outputs, done), or None
        when that path does not take it (nothing was posted). Not done: the
        reply was read here, and the outputs are fresh tensors the caller
        fills from the arena. Raises as call() does. At debug level, None:
        call() logs each call."""
        if (native.channel_call is None or num_tensors > self.max_tensors
                or log.isEnabledFor(logging.DEBUG)
                or self._closed.value or self._state.value != STATE_IDLE):
            return None
        self._seq += 1  # numbers skipped when nothing is posted do no harm
        seq = self._seq
        deadline = time.monotonic() + timeout_s
        got = native.channel_call(args, plan, self._base, seq, handle, spin_s,
                                  min(timeout_s, LIVENESS_CHECK_S), park)
        if got is None:
            return None
        outputs, run_us = got
        if run_us is not None:
            self.last_run_us = run_us
            return outputs, True
        if self._state.value != STATE_REPLY:
            self._wait_reply(deadline)
        self._finish(seq)
        return outputs, False

    def _finish(self, seq: int) -> float:
        """Reads the reply to call seq and frees the channel; its run time."""
        state = self._state
        code = self._rep_code.value
        run_us = self._rep_run_us.value
        message = ""
        if code != 0:
            n = min(self._rep_msg_bytes.value, 832)
            message = ctypes.string_at(self._base + _REP_MSG, n).decode("utf-8", "replace")
        reply_seq = self._rep_seq.value
        state.value = STATE_IDLE
        if reply_seq != seq:
            raise ChannelError(grpc.StatusCode.INTERNAL,
                               f"channel reply {reply_seq} does not answer call {seq}")
        if code != 0:
            raise ChannelError(_CODES.get(code, grpc.StatusCode.UNKNOWN), message)
        self.last_run_us = run_us
        return run_us

    def _wait_reply(self, deadline: float) -> None:
        state = self._state
        address = ctypes.c_void_p(self._base + _STATE)
        next_check = time.monotonic() + LIVENESS_CHECK_S
        while True:
            seen = state.value
            if seen == STATE_REPLY:
                return
            if self._closed.value:
                raise ChannelError(grpc.StatusCode.UNAVAILABLE, "the daemon closed the channel")
            now = time.monotonic()
            if now >= deadline:
                raise ChannelError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                   "the daemon did not finish the call in time")
            if now >= next_check:
                if not self._alive():
                    raise ChannelError(grpc.StatusCode.UNAVAILABLE,
                                       "kilnd went away during the call")
                next_check = time.monotonic() + LIVENESS_CHECK_S
            wait = max(min(deadline, next_check) - now, 1e-4)
            interval = _Timespec(int(wait), int((wait % 1) * 1e9))
            _syscall(_SYS_FUTEX, address, _FUTEX_WAIT, seen, ctypes.byref(interval), None, 0)

    def close(self) -> None:
        self.region.close()
