// aten.cumsum.default and aten.cumprod.default: running sums and products
// along one dim. The result type is the
// dtype argument if given, else i64 for integer (i64, i32) and bool inputs (as in
// ATen: position ids from masks), else the input's; each element is
// converted to it before it is added.
//
// Lines along the dim are independent: split across threads by (outer,
// inner) pairs, each summed sequentially so the order of additions (and so
// f32 rounding) is ATen's. Integer products wrap on overflow, as ATen's do.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

template <typename In, typename Out, bool kProduct>
class CumsumKernel final : public Kernel {
 public:
  explicit CumsumKernel(DimLines l) : l_(l) {}

  static Out Step(Out acc, Out x) {
    if constexpr (!kProduct) {
      return Out(acc + x);
    } else if constexpr (std::is_integral_v<Out>) {
      return static_cast<Out>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(x));
    } else {
      return acc * x;
    }
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const In* x = ctx.inputs[0].as<const In>();
    Out* y = ctx.outputs[0].as<Out>();
    const DimLines& l = l_;
    ParallelFor(l.lines(), LineGrain(l), [&](int64_t begin, int64_t end) {
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = l.base(line);
        Out acc = Out(kProduct ? 1 : 0);
        for (int64_t k = 0; k < l.n; ++k) {
          acc = Step(acc, static_cast<Out>(x[base + k * l.inner]));
          y[base + k * l.inner] = acc;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  DimLines l_;
};

template <typename Out, bool kProduct>
std::unique_ptr<Kernel> MakeCumsum(DType in, const DimLines& l) {
  switch (in) {
    case DType::kF32:
      return std::make_unique<CumsumKernel<float, Out, kProduct>>(l);
    case DType::kI64:
      return std::make_unique<CumsumKernel<int64_t, Out, kProduct>>(l);
    case DType::kI32:
      return std::make_unique<CumsumKernel<int32_t, Out, kProduct>>(l);
    case DType::kBool:
      return std::make_unique<CumsumKernel<bool, Out, kProduct>>(l);
    default:
      return nullptr;
  }
}

template <bool kProduct>
absl::StatusOr<PreparedOp> PrepareRunning(const NodeArgs& args) {
  // (self, dim, *, dtype=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  const DType natural = self.dtype == DType::kF32 ? DType::kF32 : DType::kI64;
  KILN_ASSIGN_OR_RETURN(DType out_dtype, DTypeArgOr(args, 2, "dtype", natural));
  if (out_dtype == DType::kBool) return args.Unimplemented("a bool result is not supported");
  if (self.dtype != DType::kF32 && self.dtype != DType::kI64 && self.dtype != DType::kI32 &&
      self.dtype != DType::kBool) {
    return args.Unimplemented("this dtype is not supported");
  }
  // A 0-dim tensor is its own running sum.
  KILN_ASSIGN_OR_RETURN(DimLines lines, LinesAlong(args, self, dim_arg));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{out_dtype, self.shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  op.kernel = out_dtype == DType::kF32 ? MakeCumsum<float, kProduct>(self.dtype, lines)
                                       : MakeCumsum<int64_t, kProduct>(self.dtype, lines);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareCumsum(const NodeArgs& args) {
  return PrepareRunning</*kProduct=*/false>(args);
}

absl::StatusOr<PreparedOp> PrepareCumprod(const NodeArgs& args) {
  return PrepareRunning</*kProduct=*/true>(args);
}

}  // namespace kiln::runtime
