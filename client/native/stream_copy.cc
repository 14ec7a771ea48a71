// Copies of large inputs into the call's shared-memory region.
//
// A plain memmove of a destination that is not in cache reads each of its
// lines before writing it (the read-for-ownership). Non-temporal stores
// write whole lines without that read, so a copy moves two bytes through
// memory per byte instead of three, which matters for inputs as large as a
// decode step's KV cache. The lines are then
// not in the client's cache, which costs nothing: the daemon reads them from
// the other core. SSE2 only, which every x86-64 has; the copy is bound by
// memory, not by the width of the stores.

#include "client/native/stream_copy.h"

#include <emmintrin.h>

#include <cstdint>
#include <cstring>

namespace kiln_native {

void CopyStreaming(char* dst, const char* src, size_t n) {
  // Up to the destination's first 16-byte boundary, then 64 bytes a step.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
  if (head > n) head = n;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  // Streaming stores are weakly ordered: fence them before the call is
  // posted (a plain store the daemon's read is ordered after).
  _mm_sfence();
  std::memcpy(dst + i, src + i, n - i);
}

PyObject* stream_copy(PyObject* /*module*/, PyObject* args) {
  unsigned long long dst, src, n;
  if (!PyArg_ParseTuple(args, "KKK", &dst, &src, &n)) return nullptr;
  if (dst == 0 || src == 0) {
    PyErr_SetString(PyExc_ValueError, "stream_copy: null address");
    return nullptr;
  }
  Py_BEGIN_ALLOW_THREADS
  CopyStreaming(reinterpret_cast<char*>(dst), reinterpret_cast<const char*>(src), n);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

}  // namespace kiln_native
