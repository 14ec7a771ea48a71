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
#include "runtime/kernels/element_nan.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

template <typename T, bool kMax>
class CumExtremeKernel final : public Kernel {
 public:
  explicit CumExtremeKernel(DimLines l) : l_(l) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const T* x = ctx.inputs[0].as<const T>();
    T* values = ctx.outputs[0].as<T>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    const DimLines& l = l_;
    ParallelFor(l.lines(), LineGrain(l), [&](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = l.base(line);
        T best = l.n > 0 ? x[base] : T{};
        int64_t at = 0;
        for (int64_t k = 0; k < l.n; ++k) {
          const T v = x[base + k * l.inner];
          const bool better = kMax ? v >= best : v <= best;
          if (IsNan(v) || (!IsNan(best) && better)) {
            best = v;
            at = k;
          }
          values[base + k * l.inner] = best;
          indices[base + k * l.inner] = at;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  DimLines l_;
};

template <bool kMax>
absl::StatusOr<PreparedOp> PrepareCumExtreme(const NodeArgs& args) {
  // (self, dim) -> (values, indices)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  // A 0-dim tensor is its own running extreme.
  KILN_ASSIGN_OR_RETURN(DimLines lines, LinesAlong(args, self, dim_arg));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, self.shape});
  op.outputs.push_back(TensorMeta{DType::kI64, self.shape});
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = std::make_unique<CumExtremeKernel<float, kMax>>(lines);
      break;
    case DType::kI64:
      op.kernel = std::make_unique<CumExtremeKernel<int64_t, kMax>>(lines);
      break;
    case DType::kI32:
      op.kernel = std::make_unique<CumExtremeKernel<int32_t, kMax>>(lines);
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
