// stream_copy: large input copies into shared memory (stream_copy.cc).
#pragma once

#include <Python.h>

namespace kiln_native {

// stream_copy(dst_address, src_address, nbytes) -> None. Copies with
// non-temporal stores; for regions that do not overlap.
PyObject* stream_copy(PyObject* module, PyObject* args);

}  // namespace kiln_native
