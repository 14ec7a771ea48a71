// NumPy-style broadcasting of two dense tensors for binary elementwise
// kernels: shape inference, and a plan that collapses the output into rows
// whose inner loop reads each input with stride 1 or 0, so the hot loop is a
// plain vectorizable loop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/exec/parallel.h"

namespace kiln::runtime {

// The broadcast shape of `a` and `b`, or nullopt when some aligned pair of
// sizes differs and neither is 1.
std::optional<std::vector<int64_t>> BroadcastShapes(
    const std::vector<int64_t>& a, const std::vector<int64_t>& b);

struct BroadcastPlan {
  // Output iterated as rows x inner; each row's start offset in a and b
  // follows from the collapsed outer dims below.
  std::vector<int64_t> outer_shape;
  std::vector<int64_t> a_outer_strides, b_outer_strides;
  int64_t inner = 1;
  int64_t a_inner_stride = 1, b_inner_stride = 1;  // 0 or 1
  int64_t rows = 1;
};

// `out` must be the broadcast of `a` and `b` (see BroadcastShapes).
BroadcastPlan MakeBroadcastPlan(const std::vector<int64_t>& out,
                                const std::vector<int64_t>& a,
                                const std::vector<int64_t>& b);

// out[i] = f(a[ia], b[ib]) over the plan, in parallel over rows. `out` may
// alias `a` or `b` when that input is not broadcast.
template <typename F>
void BroadcastApply(const BroadcastPlan& p, const float* a, const float* b,
                    float* out, F f) {
  const int64_t inner = p.inner;
  if (p.rows == 0 || inner == 0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / inner);
  ParallelFor(p.rows, grain, [&](int64_t begin, int64_t end) {
    const int nd = static_cast<int>(p.outer_shape.size());
    // Row offsets: found by division where a row starts a new run of the
    // innermost outer dim, else stepped. Short rows (e.g. 8 channels of a
    // blocked tensor times a per-channel gate) would otherwise spend more
    // on the divisions than on the row.
    const int64_t last_size = nd > 0 ? p.outer_shape[nd - 1] : 1;
    const int64_t last_a = nd > 0 ? p.a_outer_strides[nd - 1] : 0;
    const int64_t last_b = nd > 0 ? p.b_outer_strides[nd - 1] : 0;
    int64_t ao = 0, bo = 0, last_idx = 0;
    for (int64_t row = begin; row < end; ++row) {
      if (row == begin || ++last_idx == last_size) {
        ao = 0;
        bo = 0;
        int64_t rem = row;
        for (int d = nd - 1; d >= 0; --d) {
          const int64_t idx = rem % p.outer_shape[d];
          if (d == nd - 1) last_idx = idx;
          rem /= p.outer_shape[d];
          ao += idx * p.a_outer_strides[d];
          bo += idx * p.b_outer_strides[d];
        }
      } else {
        ao += last_a;
        bo += last_b;
      }
      const float* pa = a + ao;
      const float* pb = b + bo;
      float* po = out + row * inner;
      // One loop per stride pattern so each compiles to straight SIMD.
      if (p.a_inner_stride == 1 && p.b_inner_stride == 1) {
        for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], pb[i]);
      } else if (p.a_inner_stride == 1) {
        const float vb = *pb;
        for (int64_t i = 0; i < inner; ++i) po[i] = f(pa[i], vb);
      } else if (p.b_inner_stride == 1) {
        const float va = *pa;
        for (int64_t i = 0; i < inner; ++i) po[i] = f(va, pb[i]);
      } else {
        const float v = f(*pa, *pb);
        for (int64_t i = 0; i < inner; ++i) po[i] = v;
      }
    }
  });
}

}  // namespace kiln::runtime
