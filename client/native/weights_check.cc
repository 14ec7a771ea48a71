// The client's per-call weight check in C++ (module.cc exposes it).
//
// Before every call the client makes sure each weight compiled into a
// partition is still the tensor it uploaded: the same object, at the same
// version (in-place changes bump it) and over the same data pointer
// (`param.data = other` swaps the storage without bumping the version).
// Inference tensors have no version: for them the object and the data
// pointer are all there is to compare (docs/weights.md says why that is
// enough).
// In Python that is three maps over a few hundred tensors, and the call
// comes right after the daemon's run has evicted the caller's caches, so
// every tensor's TensorImpl, storage and version counter is a cache miss
// in a chain, a visible cost on models with hundreds of weights
// (regnet_y_400mf). Here the loads are issued pass by pass, each pass's
// misses independent of one another, so they overlap.
//
// The module reads torch's structures through torch's headers, so it is only
// valid with the torch it was built against: client/CMakeLists.txt bakes in
// that torch's version and kiln/native.py refuses a module built for another.

#include "client/native/weights_check.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace kiln_native {
namespace {

// The version counter is one pointer to a shared counter object; prefetching
// that object needs the pointer itself (VariableVersion keeps it private).
static_assert(sizeof(c10::VariableVersion) == sizeof(void*),
              "VariableVersion layout changed: update the prefetch below");

// native.NO_VERSION: the version recorded for an inference tensor.
constexpr uint64_t kNoVersion = ~uint64_t{0};

void* counter_object(const c10::TensorImpl* impl) {
  void* p;
  std::memcpy(&p, &impl->version_counter(), sizeof p);
  return p;
}

// Py_True, Py_False, or Py_None when it cannot tell. Reads storage_
// directly (unsafe_storage): storage() throws for some tensor kinds.
PyObject* compare(const std::vector<const c10::TensorImpl*>& impls, const uint64_t* want) {
  for (const c10::TensorImpl* impl : impls) {
    // A TensorImpl spans a few lines; the storage and counter pointers are
    // not at the front.
    for (int line = 0; line < 4; ++line)
      __builtin_prefetch(reinterpret_cast<const char*>(impl) + 64 * line);
  }
  for (const c10::TensorImpl* impl : impls) {
    if (impl->unsafe_storage()) __builtin_prefetch(impl->unsafe_storage().unsafeGetStorageImpl());
    if (void* counter = counter_object(impl)) __builtin_prefetch(counter);
  }
  PyObject* result = Py_True;
  for (size_t i = 0; i < impls.size(); ++i) {
    const c10::TensorImpl* impl = impls[i];
    const c10::Storage& storage = impl->unsafe_storage();
    if (!storage) return Py_None;
    // Only inference tensors lack a version counter (TensorImpl.h); they
    // are recorded as kNoVersion, as native.py's pack_expected does.
    const uint64_t version = impl->version_counter().enabled()
                                 ? impl->version_counter().current_version()
                                 : kNoVersion;
    const auto* base = static_cast<const char*>(storage.data());
    const uint64_t ptr = reinterpret_cast<uintptr_t>(
        base ? base + impl->storage_offset() * impl->itemsize() : nullptr);
    if (version != want[2 * i] || ptr != want[2 * i + 1]) result = Py_False;
  }
  return result;
}

}  // namespace

PyObject* weights_unchanged(PyObject* /*module*/, PyObject* args) {
  PyObject* got;
  PyObject* objects;
  Py_buffer expected;
  if (!PyArg_ParseTuple(args, "O!O!y*", &PyTuple_Type, &got, &PyTuple_Type, &objects,
                        &expected))
    return nullptr;
  const Py_ssize_t n = PyTuple_GET_SIZE(objects);
  if (PyTuple_GET_SIZE(got) != n ||
      expected.len != static_cast<Py_ssize_t>(2 * n * sizeof(uint64_t))) {
    PyBuffer_Release(&expected);
    PyErr_SetString(PyExc_ValueError, "weights_unchanged: lengths differ");
    return nullptr;
  }
  const auto* want = static_cast<const uint64_t*>(expected.buf);
  // Identity first: only the recorded objects are known to be tensors.
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (PyTuple_GET_ITEM(got, i) != PyTuple_GET_ITEM(objects, i)) {
      PyBuffer_Release(&expected);
      Py_RETURN_FALSE;
    }
  }
  std::vector<const c10::TensorImpl*> impls(n);
  for (Py_ssize_t i = 0; i < n; ++i)
    impls[i] = THPVariable_Unpack(PyTuple_GET_ITEM(objects, i)).unsafeGetTensorImpl();
  PyObject* result;
  try {
    result = compare(impls, want);
  } catch (...) {  // torch's checks throw; never across the C API
    result = Py_None;
  }
  PyBuffer_Release(&expected);
  Py_INCREF(result);
  return result;
}

}  // namespace kiln_native
