// weights_unchanged: the per-call weight check (weights_check.cc).
#pragma once

#include <Python.h>

namespace kiln_native {

// weights_unchanged(got, objects, expected) -> True, False or None.
//
// got, objects: tuples of the same length; objects are the tensors recorded
// when the partition was prepared. expected: bytes, two native uint64 per
// tensor (version, data pointer). True when every got[i] is objects[i] at
// its recorded version and data pointer; False when anything differs; None
// when it cannot tell (a tensor without a version counter or storage), in
// which case the caller checks in Python.
PyObject* weights_unchanged(PyObject* module, PyObject* args);

}  // namespace kiln_native
