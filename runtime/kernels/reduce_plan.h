// Which elements of a contiguous input each output element of a reduction
// combines, for any set of reduced dims: shared by the reductions of
// reduce_general.cc (sum of integers, prod, amax/amin, max/min with
// indices, argmax/argmin, var, any).
//
// Dims are split into kept and reduced ones, each list coalesced (adjacent
// dims of one kind whose strides chain merge), so the common cases become
// one reduced dim with one stride. Reduced elements are visited in the
// input's row-major order, so their running count is the flat index within
// the reduced dims (what argmax and max.dim report).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/ir/tensor_meta.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

struct ReductionPlan {
  std::vector<int64_t> out_shape;
  int64_t out_numel = 0;
  int64_t count = 0;  // reduced elements per output element
  // Kept dims (outermost first) and their input strides.
  std::vector<int64_t> kept_sizes, kept_strides;
  // Reduced dims (outermost first) and their input strides.
  std::vector<int64_t> red_sizes, red_strides;

  // Input offset of output element o's first reduced element.
  int64_t Base(int64_t o) const {
    int64_t base = 0;
    for (int i = static_cast<int>(kept_sizes.size()) - 1; i >= 0; --i) {
      base += (o % kept_sizes[i]) * kept_strides[i];
      o /= kept_sizes[i];
    }
    return base;
  }

  // Calls f(r, offset) for each reduced element r (row-major order) of
  // the output element at `base`.
  template <typename F>
  void ForEachReduced(int64_t base, F&& f) const {
    if (red_sizes.size() <= 1) {
      const int64_t s = red_sizes.empty() ? 0 : red_strides[0];
      for (int64_t r = 0; r < count; ++r) f(r, base + r * s);
      return;
    }
    const int nr = static_cast<int>(red_sizes.size());
    int64_t idx[16] = {};
    int64_t off = base;
    for (int64_t r = 0; r < count; ++r) {
      f(r, off);
      for (int j = nr - 1; j >= 0; --j) {
        off += red_strides[j];
        if (++idx[j] < red_sizes[j]) break;
        off -= idx[j] * red_strides[j];
        idx[j] = 0;
      }
    }
  }
};

// The plan for reducing `self` over `dims` (None or empty: every dim, as
// sum/amax/var read an empty list; `empty_means_all` false makes an empty
// list reduce nothing), keeping reduced dims as size 1 when `keepdim`.
// INVALID_ARGUMENT for a dim out of range or given twice.
absl::StatusOr<ReductionPlan> PlanReduction(const NodeArgs& args, const TensorMeta& self,
                                          const std::optional<std::vector<int64_t>>& dims,
                                          bool keepdim, bool empty_means_all = true);

}  // namespace kiln::runtime
