// Broadcast shape inference and iteration plans (see broadcast.h).
#include "runtime/kernels/broadcast.h"

#include <algorithm>

namespace kiln::runtime {
namespace {

// `shape` left-padded with 1s to `rank`, and its strides with 0 wherever it
// is broadcast against `out`.
std::vector<int64_t> BroadcastStrides(const std::vector<int64_t>& out,
                                      const std::vector<int64_t>& shape) {
  const size_t rank = out.size();
  std::vector<int64_t> padded(rank, 1);
  std::copy(shape.begin(), shape.end(), padded.end() - shape.size());
  std::vector<int64_t> strides(rank, 0);
  int64_t s = 1;
  for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
    strides[d] = (padded[d] == 1 && out[d] != 1) ? 0 : s;
    s *= padded[d];
  }
  return strides;
}

}  // namespace

std::optional<std::vector<int64_t>> BroadcastShapes(
    const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

BroadcastPlan MakeBroadcastPlan(const std::vector<int64_t>& out,
                                const std::vector<int64_t>& a,
                                const std::vector<int64_t>& b) {
  const std::vector<int64_t> sa = BroadcastStrides(out, a);
  const std::vector<int64_t> sb = BroadcastStrides(out, b);
  // Drop size-1 dims, then merge neighbours that both inputs traverse
  // contiguously (or both broadcast), innermost first.
  std::vector<int64_t> shape, as, bs;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!shape.empty() && as.back() == sa[d] * out[d] &&
        bs.back() == sb[d] * out[d]) {
      shape.back() *= out[d];
      as.back() = sa[d];
      bs.back() = sb[d];
      continue;
    }
    shape.push_back(out[d]);
    as.push_back(sa[d]);
    bs.push_back(sb[d]);
  }
  BroadcastPlan p;
  if (shape.empty()) {  // a single element
    p.inner = 1;
    p.rows = 1;
    return p;
  }
  p.inner = shape.back();
  p.a_inner_stride = as.back();
  p.b_inner_stride = bs.back();
  shape.pop_back();
  as.pop_back();
  bs.pop_back();
  p.outer_shape = shape;
  p.a_outer_strides = as;
  p.b_outer_strides = bs;
  p.rows = 1;
  for (int64_t d : shape) p.rows *= d;
  return p;
}

}  // namespace kiln::runtime
