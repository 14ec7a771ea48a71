// aten.cummax.default and aten.cummin.default: the running maximum
// (minimum) along one dim and the index where it was found. As in ATen, a
// later equal element moves the index to it, and a NaN, once met, is the
// running value (a later NaN moves the index again).
//
// Lines along the dim are independent: split across threads by (outer,
// inner) pairs, each scanned sequentially.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

template <typename T, bool kMax>
class CumExtremeKernel final : public Kernel {
 public:
  CumExtremeKernel(int64_t outer, int64_t n, int64_t inner) : outer_(outer), n_(n), inner_(inner) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const T* x = ctx.inputs[0].as<const T>();
    T* values = ctx.outputs[0].as<T>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    const int64_t lines = outer_ * inner_;
    ParallelFor(lines, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(n_, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t line = begin; line < end; ++line) {
                    const int64_t base = (line / inner_) * n_ * inner_ + line % inner_;
                    T best = n_ > 0 ? x[base] : T{};
                    int64_t at = 0;
                    for (int64_t k = 0; k < n_; ++k) {
                      const T v = x[base + k * inner_];
                      const bool better = kMax ? v >= best : v <= best;
                      if (IsNan(v) || (!IsNan(best) && better)) {
                        best = v;
                        at = k;
                      }
                      values[base + k * inner_] = best;
                      indices[base + k * inner_] = at;
                    }
                  }
                });
    return absl::OkStatus();
  }

 private:
  int64_t outer_, n_, inner_;
};

template <bool kMax>
absl::StatusOr<PreparedOp> PrepareCumExtreme(const NodeArgs& args) {
  // (self, dim) -> (values, indices)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  // A 0-dim tensor is its own running extreme, along dim 0 or -1.
  const int rank = std::max(self.rank(), 1);
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, rank));
  const std::vector<int64_t> shape = self.rank() == 0 ? std::vector<int64_t>{1} : self.shape;
  const int64_t outer = Product(shape, 0, dim);
  const int64_t n = shape[dim];
  const int64_t inner = Product(shape, dim + 1, rank);
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, self.shape});
  op.outputs.push_back(TensorMeta{DType::kI64, self.shape});
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = std::make_unique<CumExtremeKernel<float, kMax>>(outer, n, inner);
      break;
    case DType::kI64:
      op.kernel = std::make_unique<CumExtremeKernel<int64_t, kMax>>(outer, n, inner);
      break;
    case DType::kI32:
      op.kernel = std::make_unique<CumExtremeKernel<int32_t, kMax>>(outer, n, inner);
      break;
    default:
      return args.Unimplemented(absl::StrCat("cannot scan ", self.ToString()));
  }
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareCummax(const NodeArgs& args) {
  return PrepareCumExtreme</*kMax=*/true>(args);
}

absl::StatusOr<PreparedOp> PrepareCummin(const NodeArgs& args) {
  return PrepareCumExtreme</*kMax=*/false>(args);
}

}  // namespace kiln::runtime
