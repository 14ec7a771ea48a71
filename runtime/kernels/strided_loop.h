// Iteration over a dense output whose inputs are read through arbitrary
// element strides (0 where an input is broadcast, any value for slices and
// permutations). Dims are coalesced once at prepare time; Run() walks the
// output as rows of `inner` contiguous elements, handing each row's input
// offsets to a callback whose inner loop the compiler can vectorize.
//
// Shared by the dtype-generic kernels (binary/ternary elementwise with
// broadcasting, expand/slice/select copies, casts).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/exec/parallel.h"

namespace kiln::runtime {

inline constexpr int kMaxStridedInputs = 3;

struct StridedPlan {
  int num_inputs = 0;
  // Coalesced outer dims (outermost first) and each input's strides there.
  std::vector<int64_t> outer_shape;
  std::array<std::vector<int64_t>, kMaxStridedInputs> outer_strides;
  std::array<int64_t, kMaxStridedInputs> inner_strides{};
  int64_t inner = 1;
  int64_t rows = 0;  // 0 when the output is empty
};

// Element strides with which an input of `in_shape` (right-aligned,
// NumPy-style) is read for an output of `out_shape`: 0 on broadcast dims.
// `out_shape` must be a broadcast of `in_shape`.
std::vector<int64_t> BroadcastInputStrides(const std::vector<int64_t>& out_shape,
                                           const std::vector<int64_t>& in_shape);

// `in_strides[i]` has one stride per output dim for input i
// (1 <= in_strides.size() <= kMaxStridedInputs).
StridedPlan MakeStridedPlan(const std::vector<int64_t>& out_shape,
                            const std::vector<std::vector<int64_t>>& in_strides);

// Calls fn(out_offset, in_offsets) once per row of p.inner output elements
// (in parallel over rows); in_offsets[i] is input i's element offset of the
// row's first element. Rows are grouped so a task touches ~32K elements.
template <typename F>
void ForEachRow(const StridedPlan& p, F&& fn) {
  if (p.rows == 0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / p.inner);
  const int nd = static_cast<int>(p.outer_shape.size());
  const int ni = p.num_inputs;
  ParallelFor(p.rows, grain, [&](int64_t begin, int64_t end) {
    // Odometer over the outer dims, started at row `begin`.
    std::array<int64_t, 8> idx{};
    std::array<int64_t, kMaxStridedInputs> off{};
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; --d) {
      idx[d] = rem % p.outer_shape[d];
      rem /= p.outer_shape[d];
      for (int i = 0; i < ni; ++i) off[i] += idx[d] * p.outer_strides[i][d];
    }
    for (int64_t row = begin; row < end; ++row) {
      fn(row * p.inner, off.data());
      for (int d = nd - 1; d >= 0; --d) {
        for (int i = 0; i < ni; ++i) off[i] += p.outer_strides[i][d];
        if (++idx[d] < p.outer_shape[d]) break;
        for (int i = 0; i < ni; ++i) {
          off[i] -= idx[d] * p.outer_strides[i][d];
        }
        idx[d] = 0;
      }
    }
  });
}

// out[i] = in[offset_of(i)] for elements of `elem_size` bytes (1, 4 or 8)
// over a one-input plan: the copy behind expand, slice, select and
// permutes of any dtype. `in` points at the input's element 0.
void StridedCopy(const StridedPlan& p, int elem_size, const void* in,
                 void* out);

}  // namespace kiln::runtime
