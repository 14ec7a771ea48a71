// Coalescing of strided iteration plans and the dtype-agnostic strided copy
// (see strided_loop.h).
#include "runtime/kernels/strided_loop.h"

#include <cstring>

namespace kiln::runtime {

std::vector<int64_t> BroadcastInputStrides(const std::vector<int64_t>& out_shape,
                                           const std::vector<int64_t>& in_shape) {
  const size_t rank = out_shape.size();
  const size_t pad = rank - in_shape.size();
  std::vector<int64_t> strides(rank, 0);
  int64_t s = 1;
  for (int d = static_cast<int>(in_shape.size()) - 1; d >= 0; --d) {
    strides[d + pad] = (in_shape[d] == 1 && out_shape[d + pad] != 1) ? 0 : s;
    s *= in_shape[d];
  }
  return strides;
}

StridedPlan MakeStridedPlan(
    const std::vector<int64_t>& out_shape,
    const std::vector<std::vector<int64_t>>& in_strides) {
  StridedPlan p;
  p.num_inputs = static_cast<int>(in_strides.size());
  const int ni = p.num_inputs;
  int64_t numel = 1;
  for (int64_t d : out_shape) numel *= d;
  if (numel == 0) return p;
  // Drop size-1 dims; merge a dim into its outer neighbour when every input
  // walks the pair as one run.
  std::vector<int64_t> shape;
  std::array<std::vector<int64_t>, kMaxStridedInputs> st;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    bool merge = !shape.empty();
    for (int i = 0; merge && i < ni; ++i) {
      merge = st[i].back() == in_strides[i][d] * out_shape[d];
    }
    if (merge) {
      shape.back() *= out_shape[d];
      for (int i = 0; i < ni; ++i) st[i].back() = in_strides[i][d];
      continue;
    }
    shape.push_back(out_shape[d]);
    for (int i = 0; i < ni; ++i) st[i].push_back(in_strides[i][d]);
  }
  if (shape.empty()) {
    p.inner = 1;
    p.rows = 1;
    for (int i = 0; i < ni; ++i) p.inner_strides[i] = 0;
    return p;
  }
  p.inner = shape.back();
  shape.pop_back();
  for (int i = 0; i < ni; ++i) {
    p.inner_strides[i] = st[i].back();
    st[i].pop_back();
    p.outer_strides[i] = st[i];
  }
  p.outer_shape = shape;
  p.rows = 1;
  for (int64_t d : shape) p.rows *= d;
  return p;
}

namespace {

template <typename T>
void CopyRows(const StridedPlan& p, const T* in, T* out) {
  const int64_t inner = p.inner;
  const int64_t s = p.inner_strides[0];
  ForEachRow(p, [&](int64_t o, const int64_t* off) {
    const T* src = in + off[0];
    T* dst = out + o;
    if (s == 1) {
      std::memcpy(dst, src, inner * sizeof(T));
    } else if (s == 0) {
      const T v = *src;
      for (int64_t i = 0; i < inner; ++i) dst[i] = v;
    } else {
      for (int64_t i = 0; i < inner; ++i) dst[i] = src[i * s];
    }
  });
}

}  // namespace

void StridedCopy(const StridedPlan& p, int elem_size, const void* in,
                 void* out) {
  switch (elem_size) {
    case 1:
      CopyRows(p, static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out));
      break;
    case 2:
      CopyRows(p, static_cast<const uint16_t*>(in),
               static_cast<uint16_t*>(out));
      break;
    case 4:
      CopyRows(p, static_cast<const uint32_t*>(in),
               static_cast<uint32_t*>(out));
      break;
    default:
      CopyRows(p, static_cast<const uint64_t*>(in),
               static_cast<uint64_t*>(out));
      break;
  }
}

}  // namespace kiln::runtime
