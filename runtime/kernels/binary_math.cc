// Integer and bool arithmetic with broadcasting and type promotion
// (typed_elementwise.h): aten.bitwise_and.Tensor, aten.maximum and
// aten.minimum (every dtype; NaN wins, as in ATen), and the uses of
// aten.add.Tensor and aten.sub.Tensor that involve i64 (position ids, cache
// offsets, mask arithmetic); f32 tensor +/- f32 tensor/number keeps
// elementwise.cc's kernels, which compile passes know how to fuse.
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

// elementwise.cc: the f32 add and sub kernels (not in ops.def themselves:
// aten.add.Tensor and aten.sub.Tensor are registered to PrepareAddTensor
// and PrepareSubTensor below, which forward f32 to them).
absl::StatusOr<PreparedOp> PrepareAdd(const NodeArgs& args);
absl::StatusOr<PreparedOp> PrepareSub(const NodeArgs& args);

namespace {

enum class Arith { kAdd, kSub, kBitAnd, kMax, kMin };

// ATen's maximum/minimum: a NaN operand gives NaN.
template <typename C>
C MaxOf(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x || y != y) return x + y;  // NaN
  }
  return x > y ? x : y;
}
template <typename C>
C MinOf(C x, C y) {
  if constexpr (std::is_floating_point_v<C>) {
    if (x != x || y != y) return x + y;
  }
  return x < y ? x : y;
}

template <typename C>
std::unique_ptr<Kernel> ArithKernel(Arith kind, const Operand& a,
                                    const Operand& b,
                                    const std::vector<int64_t>& out,
                                    DType compute, C alpha) {
  switch (kind) {
    case Arith::kAdd:
      if (alpha == C(1)) {
        return MakeBinaryKernel<C, C>(a, b, out, compute,
                                      [](C x, C y) { return C(x + y); });
      }
      return MakeBinaryKernel<C, C>(
          a, b, out, compute, [alpha](C x, C y) { return C(x + alpha * y); });
    case Arith::kSub:
      if constexpr (std::is_same_v<C, bool>) {
        return nullptr;  // refused at prepare time
      } else {
        return MakeBinaryKernel<C, C>(
            a, b, out, compute, [alpha](C x, C y) { return C(x - alpha * y); });
      }
    case Arith::kMax:
      return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return MaxOf(x, y); });
    case Arith::kMin:
      return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return MinOf(x, y); });
    case Arith::kBitAnd:
      if constexpr (std::is_floating_point_v<C>) {
        return nullptr;  // refused at prepare time
      } else {
        return MakeBinaryKernel<C, C>(a, b, out, compute,
                                      [](C x, C y) { return C(x & y); });
      }
  }
  return nullptr;
}

absl::StatusOr<PreparedOp> PrepareArith(const NodeArgs& args, Arith kind) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  if (!a.is_tensor) return args.Error("self must be a tensor");
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other"));
  if ((kind == Arith::kMax || kind == Arith::kMin) && !b.is_tensor) {
    return args.Error("other must be a tensor");
  }
  DType compute = PromoteTypes(a.dtype, b.dtype);
  double alpha = 1.0;
  if (kind == Arith::kAdd || kind == Arith::kSub) {
    const Arg* alpha_arg = args.Find(2, "alpha");
    if (alpha_arg != nullptr) {
      KILN_ASSIGN_OR_RETURN(alpha, args.Float(2, "alpha", 1.0));
      if (alpha_arg->kind == Arg::Kind::kFloat && compute != DType::kF32) {
        return args.Error("a float alpha needs a floating-point result");
      }
    }
    if (compute == DType::kBool) {
      // bool + bool is logical or in ATen, bool - bool an error; neither
      // is needed by any model yet.
      return args.Unimplemented(kind == Arith::kAdd ? "add of two bool operands is not supported"
                                                    : "subtraction of two bool operands is not supported");
    }
  }
  if (kind == Arith::kBitAnd && compute == DType::kF32) {
    return args.Error("bitwise_and is not defined for floating-point operands");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        BroadcastOperands(args, {&a, &b}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{compute, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  switch (compute) {
    case DType::kF32:
      op.kernel = ArithKernel<float>(kind, a, b, shape, compute,
                                     static_cast<float>(alpha));
      break;
    case DType::kI64:
      op.kernel = ArithKernel<int64_t>(kind, a, b, shape, compute,
                                       static_cast<int64_t>(alpha));
      break;
    default:
      op.kernel = ArithKernel<bool>(kind, a, b, shape, compute, true);
      break;
  }
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareAddTensor(const NodeArgs& args) {
  // f32 tensor + (f32 tensor | number) stays on elementwise.cc's kernel,
  // which compile passes know how to fuse.
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other"));
  if (a.is_tensor && a.dtype == DType::kF32 &&
      (!b.is_tensor || b.dtype == DType::kF32)) {
    return PrepareAdd(args);
  }
  return PrepareArith(args, Arith::kAdd);
}

absl::StatusOr<PreparedOp> PrepareSubTensor(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other"));
  if (a.is_tensor && a.dtype == DType::kF32 &&
      (!b.is_tensor || b.dtype == DType::kF32)) {
    return PrepareSub(args);
  }
  return PrepareArith(args, Arith::kSub);
}

absl::StatusOr<PreparedOp> PrepareBitwiseAnd(const NodeArgs& args) {
  return PrepareArith(args, Arith::kBitAnd);
}

absl::StatusOr<PreparedOp> PrepareMaximum(const NodeArgs& args) {
  return PrepareArith(args, Arith::kMax);
}

absl::StatusOr<PreparedOp> PrepareMinimum(const NodeArgs& args) {
  return PrepareArith(args, Arith::kMin);
}

}  // namespace kiln::runtime
