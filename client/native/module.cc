// _kiln_native: the Python client's C++ helpers (kiln/native.py loads it).

#include <Python.h>

#include "client/native/channel_call.h"
#include "client/native/stream_copy.h"
#include "client/native/weights_check.h"

namespace {

PyMethodDef methods[] = {
    {"weights_unchanged", kiln_native::weights_unchanged, METH_VARARGS,
     "weights_unchanged(got, objects, expected) -> True, False or None"},
    {"stream_copy", kiln_native::stream_copy, METH_VARARGS,
     "stream_copy(dst_address, src_address, nbytes): non-temporal copy"},
    {"channel_call", kiln_native::channel_call, METH_VARARGS,
     "channel_call(args, plan, channel_address, seq, handle, spin_s, wait_s, park=False) -> "
     "None or (outputs, run_us)"},
    {"parked_calls", kiln_native::parked_calls, METH_NOARGS,
     "parked_calls() -> int: calls that put PyTorch's OpenMP workers to sleep while waiting"},
    {"scalar_type", kiln_native::scalar_type, METH_VARARGS,
     "scalar_type(dtype) -> int: the dtype's code in plans"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kiln_native",
                      "Kiln client's C++ helpers (client/native).", -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__kiln_native() {
  PyObject* m = PyModule_Create(&module);
  // What kiln/native.py compares with torch.__version__: weights_unchanged
  // reads torch's structures as this version lays them out.
  if (m != nullptr && PyModule_AddStringConstant(m, "torch_version", KILN_TORCH_VERSION) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
