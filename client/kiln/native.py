"""The client's optional C++ helpers (_kiln_native, client/native/).

- weights_unchanged: the per-call weight check of subgraph.py, faster
  than Python's on models with many weights (client/native/weights_check.cc
  says why);
- stream_copy: copies of large inputs into shared memory with
  non-temporal stores (client/native/stream_copy.cc);
- channel_call: a whole call through a call channel, from the input
  checks and copies to the output copies (client/native/channel_call.cc),
  given a plan that pack_plan writes; while it waits for a long run it
  can put PyTorch's spinning OpenMP workers to sleep
  (client/native/omp_park.h; parked_calls counts those calls).

The module reads torch's own structures, so it is used only when it was
built against the torch this process runs and passes a self-test at
import; otherwise the client does all three in Python and says why (at debug
level when the module is simply missing). `make setup` builds it and links
it into the venv. KILN_NATIVE=0 turns it off.
"""
from __future__ import annotations

import ctypes
import logging
import operator
import struct
from typing import Callable, Sequence

import torch

from kiln import channel_layout as layout
from kiln import options

log = logging.getLogger(__name__)

# weights_unchanged(got, objects, expected) -> True / False / None (cannot tell)
WeightsCheck = Callable[[tuple, tuple, bytes], "bool | None"]
# stream_copy(dst_address, src_address, nbytes)
StreamCopy = Callable[[int, int, int], None]
# channel_call(args, plan, channel_address, seq, handle, spin_s, wait_s, park)
#   -> None | (outputs, run_us | None)
ChannelCall = Callable[[tuple, bytes, int, int, int, float, float, bool], "tuple | None"]


_version_of = operator.attrgetter("_version")
_data_ptr_of = torch.Tensor.data_ptr

# The version recorded for an inference tensor, which has no version
# counter. torch refuses in-place changes to one outside
# torch.inference_mode(); inside it they are not counted anywhere, so for
# such a weight the check is the object and its storage (docs/weights.md).
# weights_check.cc records the same value.
NO_VERSION = (1 << 64) - 1


def recorded_version(t: torch.Tensor) -> int:
    return NO_VERSION if t.is_inference() else t._version


def pack_expected(tensors: Sequence[torch.Tensor]) -> bytes:
    """The `expected` argument: (version, data pointer) per tensor. Also
    the Python check itself (subgraph.py), so kept to C-level maps (a
    slower map when some tensor is an inference tensor)."""
    fields = [0] * (2 * len(tensors))
    try:
        fields[0::2] = map(_version_of, tensors)
    except RuntimeError:  # an inference tensor: "do not track version counter"
        fields[0::2] = map(recorded_version, tensors)
    fields[1::2] = map(_data_ptr_of, tensors)
    return struct.pack(f"={len(fields)}Q", *fields)


def pack_plan(stream_min: int,
              inputs: Sequence[tuple[int, int, int, torch.dtype, Sequence[int]]],
              outputs: Sequence[tuple[int, int, torch.dtype, Sequence[int], Sequence[int]]],
              slots: bytes) -> bytes:
    """channel_call's plan: native uint64 words (channel_call.cc reads them).

    inputs: (argument position, destination address, bytes, dtype, shape);
    outputs: (source address, bytes, dtype, shape, strides); slots: the
    channel's slot bytes. Inputs of stream_min bytes or more are copied
    with streaming stores. Needs the module loaded (its dtype codes)."""
    words = [len(inputs), len(outputs), stream_min]
    for position, address, nbytes, dtype, shape in inputs:
        words += [position, address, nbytes, _scalar_types[dtype], len(shape), *shape]
    for address, nbytes, dtype, shape, strides in outputs:
        words += [address, nbytes, _scalar_types[dtype], len(shape), *shape, *strides]
    return struct.pack(f"={len(words)}Q", *words) + slots


# torch.dtype -> the module's code for it (c10::ScalarType), filled by _load.
_scalar_types: dict[torch.dtype, int] = {}


def _channel_self_test(module) -> str | None:
    """Posts a call into a block no daemon serves and reads what arrived."""
    block = ctypes.create_string_buffer(layout.SLOTS_OFFSET + 2 * layout.SLOT_BYTES)
    base = ctypes.addressof(block)
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    dst = torch.zeros(2, 3, dtype=torch.float32)
    slots = struct.pack("<6Q", 7, 64, 24, 7, 128, 8)
    plan = pack_plan(1 << 62, [(1, dst.data_ptr(), 24, torch.float32, (2, 3))],
                     [(dst.data_ptr(), 8, torch.int64, (1,), (1,))], slots)
    if module.channel_call((None, src.double()), plan, base, 5, 11, 0.0, 0.0) is not None:
        return "a call with a wrong input taken"
    got = module.channel_call((None, src), plan, base, 5, 11, 0.0, 0.0)
    if got is None or got[1] is not None or len(got[0]) != 1:
        return "an unanswered call not handed back"
    out = got[0][0]
    if out.dtype != torch.int64 or out.shape != (1,) or not torch.equal(dst, src):
        return "input or output metas wrong"
    raw = block.raw
    if (struct.unpack_from("<I", raw, layout._STATE)[0] != layout.STATE_REQUEST
            or struct.unpack_from("<QQII", raw, layout._REQ_SEQ) != (5, 11, 1, 1)
            or raw[layout.SLOTS_OFFSET:layout.SLOTS_OFFSET + len(slots)] != slots):
        return "the request is not laid out as the channel's"
    return None


def _self_test(check: WeightsCheck, copy: StreamCopy) -> str | None:
    """Why the module cannot be trusted with this torch, or None."""
    src = torch.arange(300, dtype=torch.uint8)
    dst = torch.zeros(300, dtype=torch.uint8)
    copy(dst.data_ptr() + 5, src.data_ptr() + 3, 250)  # unaligned, with a tail
    if not (torch.equal(dst[5:255], src[3:253]) and not dst[:5].any()
            and not dst[255:].any()):
        return "stream_copy copied wrongly"
    a, b = torch.zeros(4, dtype=torch.float32), torch.ones(2, 3, dtype=torch.float32)[:, 1]
    objects = (a, b)
    expected = pack_expected(objects)
    if check(objects, objects, expected) is not True:
        return "unchanged tensors reported changed"
    if check((a, torch.zeros_like(a)), objects, expected) is not False:
        return "another object not noticed"
    a.add_(1)
    if check(objects, objects, expected) is not False:
        return "an in-place change not noticed"
    expected = pack_expected(objects)
    a.data = torch.zeros_like(a)
    if check(objects, objects, expected) is not False:
        return "a swapped storage not noticed"
    with torch.inference_mode():
        c = torch.zeros(1, dtype=torch.float32)
    expected = pack_expected((c,))
    if struct.unpack("=Q", expected[:8])[0] != NO_VERSION:
        return "an inference tensor's version not recorded as NO_VERSION"
    if check((c,), (c,), expected) is not True:
        return "an unchanged inference tensor reported changed"
    if check((c,), (c,), struct.pack("=2Q", 0, c.data_ptr())) is not False:
        return "an inference tensor taken for one with a version counter"
    return None


def _load():
    """The module, or None."""
    if not options.env_switch("KILN_NATIVE"):
        log.debug("native helpers off (KILN_NATIVE)")
        return None
    try:
        import _kiln_native
    except ImportError as e:
        log.debug("native helpers not available (%s); using Python's", e)
        return None
    if _kiln_native.torch_version != torch.__version__:
        log.warning("kiln: %s was built for torch %s, this is torch %s; using Python "
                    "instead (rebuild with `make setup`)", _kiln_native.__file__,
                    _kiln_native.torch_version, torch.__version__)
        return None
    _scalar_types.update((dtype, _kiln_native.scalar_type(dtype))
                         for dtype in vars(torch).values() if isinstance(dtype, torch.dtype))
    # Tensors made here must be ordinary ones whatever mode the first
    # compile runs in: under torch.inference_mode() they would have no
    # version counter to test with.
    with torch.inference_mode(False):
        problem = (_self_test(_kiln_native.weights_unchanged, _kiln_native.stream_copy)
                   or _channel_self_test(_kiln_native))
    if problem is not None:
        _scalar_types.clear()
        log.warning("kiln: %s failed its self-test (%s); using Python instead",
                    _kiln_native.__file__, problem)
        return None
    return _kiln_native


_loaded = _load()
weights_unchanged: WeightsCheck | None = _loaded and _loaded.weights_unchanged
stream_copy: StreamCopy | None = _loaded and _loaded.stream_copy
channel_call: ChannelCall | None = _loaded and _loaded.channel_call
parked_calls: Callable[[], int] | None = _loaded and _loaded.parked_calls
