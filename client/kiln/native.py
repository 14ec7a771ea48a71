"""The client's optional C++ helpers (_kiln_native, client/native/).

- weights_unchanged: the per-call weight check of subgraph.py, about 0.3 ms
  a call faster on a small CNN (client/native/weights_check.cc says why);
- stream_copy: copies of large inputs into shared memory with
  non-temporal stores (client/native/stream_copy.cc).

The module reads torch's own structures, so it is used only when it was
built against the torch this process runs and passes a self-test at
import; otherwise the client does both in Python and says why (at debug
level when the module is simply missing). `make setup` builds it and links
it into the venv. KILN_NATIVE=0 turns it off.
"""
from __future__ import annotations

import logging
import operator
import os
import struct
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)

# weights_unchanged(got, objects, expected) -> True / False / None (cannot tell)
WeightsCheck = Callable[[tuple, tuple, bytes], "bool | None"]
# stream_copy(dst_address, src_address, nbytes)
StreamCopy = Callable[[int, int, int], None]


_version_of = operator.attrgetter("_version")
_data_ptr_of = torch.Tensor.data_ptr


def pack_expected(tensors: Sequence[torch.Tensor]) -> bytes:
    """The `expected` argument: (version, data pointer) per tensor. Also
    the Python check itself (subgraph.py), so kept to C-level maps."""
    fields = [0] * (2 * len(tensors))
    fields[0::2] = map(_version_of, tensors)
    fields[1::2] = map(_data_ptr_of, tensors)
    return struct.pack(f"={len(fields)}Q", *fields)


def _self_test(check: WeightsCheck, copy: StreamCopy) -> str | None:
    """Why the module cannot be trusted with this torch, or None."""
    src = torch.arange(300, dtype=torch.uint8)
    dst = torch.zeros(300, dtype=torch.uint8)
    copy(dst.data_ptr() + 5, src.data_ptr() + 3, 250)  # unaligned, with a tail
    if not (torch.equal(dst[5:255], src[3:253]) and not dst[:5].any()
            and not dst[255:].any()):
        return "stream_copy copied wrongly"
    a, b = torch.zeros(4), torch.ones(2, 3)[:, 1]
    objects = (a, b)
    expected = pack_expected(objects)
    if check(objects, objects, expected) is not True:
        return "unchanged tensors reported changed"
    if check((a, torch.zeros(4)), objects, expected) is not False:
        return "another object not noticed"
    a.add_(1)
    if check(objects, objects, expected) is not False:
        return "an in-place change not noticed"
    expected = pack_expected(objects)
    a.data = torch.zeros(4)
    if check(objects, objects, expected) is not False:
        return "a swapped storage not noticed"
    with torch.inference_mode():
        c = torch.zeros(1)
    if check((c,), (c,), struct.pack("=2Q", 0, c.data_ptr())) is not None:
        return "a tensor without a version counter not refused"
    return None


def _load() -> tuple[WeightsCheck | None, StreamCopy | None]:
    if os.environ.get("KILN_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        log.debug("native helpers off (KILN_NATIVE)")
        return None, None
    try:
        import _kiln_native
    except ImportError as e:
        log.debug("native helpers not available (%s); using Python's", e)
        return None, None
    if _kiln_native.torch_version != torch.__version__:
        log.warning("kiln: %s was built for torch %s, this is torch %s; using Python "
                    "instead (rebuild with `make setup`)", _kiln_native.__file__,
                    _kiln_native.torch_version, torch.__version__)
        return None, None
    problem = _self_test(_kiln_native.weights_unchanged, _kiln_native.stream_copy)
    if problem is not None:
        log.warning("kiln: %s failed its self-test (%s); using Python instead",
                    _kiln_native.__file__, problem)
        return None, None
    return _kiln_native.weights_unchanged, _kiln_native.stream_copy


weights_unchanged: WeightsCheck | None
stream_copy: StreamCopy | None
weights_unchanged, stream_copy = _load()
