// stream_copy: large input copies into shared memory (stream_copy.cc).
#pragma once

#include <Python.h>

#include <cstddef>

namespace kiln_native {

// Copies n bytes with non-temporal stores, fenced before it returns; the
// regions must not overlap.
void CopyStreaming(char* dst, const char* src, size_t n);

// stream_copy(dst_address, src_address, nbytes) -> None. Copies with
// non-temporal stores; for regions that do not overlap.
PyObject* stream_copy(PyObject* module, PyObject* args);

}  // namespace kiln_native
