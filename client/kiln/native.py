"""The client's optional C++ helper (_kiln_native, client/native/).

One function, weights_unchanged, does the per-call weight check of
subgraph.py in C++, about 0.3 ms a call faster on a small CNN (see
client/native/weights_check.cc for why). The module reads torch's own
structures, so it is used only when it was built against the torch this
process runs and passes a self-test at import; otherwise the client checks
in Python and says why at debug level. `make setup` builds it and links it
into the venv. KILN_NATIVE=0 turns it off.
"""
from __future__ import annotations

import logging
import os
import struct
from typing import Callable, Sequence

import torch

log = logging.getLogger(__name__)

# weights_unchanged(got, objects, expected) -> True / False / None (cannot tell)
WeightsCheck = Callable[[tuple, tuple, bytes], "bool | None"]


def pack_expected(tensors: Sequence[torch.Tensor]) -> bytes:
    """The `expected` argument: (version, data pointer) per tensor."""
    return struct.pack(f"={2 * len(tensors)}Q",
                       *[x for t in tensors for x in (t._version, t.data_ptr())])


def _self_test(check: WeightsCheck) -> str | None:
    """Why the module cannot be trusted with this torch, or None."""
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


def _load() -> WeightsCheck | None:
    if os.environ.get("KILN_NATIVE", "1").strip().lower() in ("0", "false", "no", "off"):
        log.debug("native helper off (KILN_NATIVE)")
        return None
    try:
        import _kiln_native
    except ImportError as e:
        log.debug("native helper not available (%s); checking weights in Python", e)
        return None
    if _kiln_native.torch_version != torch.__version__:
        log.warning("kiln: %s was built for torch %s, this is torch %s; checking weights in "
                    "Python (rebuild with `make setup`)", _kiln_native.__file__,
                    _kiln_native.torch_version, torch.__version__)
        return None
    problem = _self_test(_kiln_native.weights_unchanged)
    if problem is not None:
        log.warning("kiln: %s failed its self-test (%s); checking weights in Python",
                    _kiln_native.__file__, problem)
        return None
    return _kiln_native.weights_unchanged


weights_unchanged: WeightsCheck | None = _load()
