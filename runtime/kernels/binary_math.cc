// Arithmetic over f32, i64, i32 (add, sub, mul, bitwise) and bool with
// broadcasting and type promotion
// (typed_elementwise.h), by ATen's semantics per dtype: the bitwise ops,
// aten.maximum/minimum (NaN wins) and fmax/fmin (NaN loses), division with
// a rounding mode, remainder (the divisor's sign) and fmod (the
// dividend's), pow with a tensor exponent, atan2, hypot, copysign; and the
// uses of aten.add, sub, mul and div that involve integers (position ids,
// cache offsets, mask arithmetic). f32 tensor with f32 tensor or number
// keeps elementwise.cc's kernels, which compile passes know how to fuse.
//
// Integer division or remainder by zero raises in ATen; here it gives 0
// (a kernel cannot raise per element), so such graphs are not exact.
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/element_nan.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

// elementwise.cc: the f32 add, sub, mul and div kernels (not in ops.def
// themselves: the aten ops are registered to the Prepare*Tensor functions
// below, which forward f32 to them).
absl::StatusOr<PreparedOp> PrepareAdd(const NodeArgs& args);
absl::StatusOr<PreparedOp> PrepareSub(const NodeArgs& args);
absl::StatusOr<PreparedOp> PrepareMul(const NodeArgs& args);
absl::StatusOr<PreparedOp> PrepareDiv(const NodeArgs& args);

namespace {

enum class Arith {
  kAdd, kSub, kMul, kDiv, kDivTrunc, kDivFloor, kRemainder, kFmod, kPow, kAtan2, kHypot,
  kCopysign, kBitAnd, kBitOr, kBitXor, kMax, kMin, kFmax, kFmin,
};

// Ops whose result is floating point whatever the operands' types.
bool FloatResult(Arith k) {
  return k == Arith::kDiv || k == Arith::kAtan2 || k == Arith::kHypot || k == Arith::kCopysign;
}
bool Bitwise(Arith k) { return k == Arith::kBitAnd || k == Arith::kBitOr || k == Arith::kBitXor; }

// ATen's floor division of floats (div_floor_floating): exact where the
// quotient is an integer, and the sign of zero follows a / b.
inline float FloorDivF(float a, float b) {
  if (b == 0.f) return a / b;
  float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0.f && ((b < 0.f) != (mod < 0.f))) div -= 1.f;
  if (div == 0.f) return std::copysign(0.f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.f;
  return floordiv;
}

inline int64_t FloorDivI(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return static_cast<int64_t>(0ull - static_cast<uint64_t>(a));  // no overflow trap
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

inline float RemainderF(float a, float b) {
  float mod = std::fmod(a, b);
  if (mod != 0.f && ((b < 0.f) != (mod < 0.f))) mod += b;
  return mod;
}

inline int64_t RemainderI(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t mod = a % b;
  if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
  return mod;
}

// Integer power by squaring; negative exponents as ATen: 1 and -1 keep
// their powers, every other base gives 0.
inline int64_t PowI(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp & 1) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, b = static_cast<uint64_t>(base);
  while (exp) {
    if (exp & 1) result *= b;
    b *= b;
    exp >>= 1;
  }
  return static_cast<int64_t>(result);
}

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
      if constexpr (std::is_integral_v<C> && !std::is_same_v<C, bool>) {
        // Integers wrap, as ATen's do: through unsigned arithmetic (no UB).
        return MakeBinaryKernel<C, C>(a, b, out, compute, [alpha](C x, C y) {
          return static_cast<C>(static_cast<uint64_t>(x) +
                                static_cast<uint64_t>(alpha) * static_cast<uint64_t>(y));
        });
      }
      if (alpha == C(1)) {
        return MakeBinaryKernel<C, C>(a, b, out, compute,
                                      [](C x, C y) { return C(x + y); });
      }
      return MakeBinaryKernel<C, C>(
          a, b, out, compute, [alpha](C x, C y) { return C(x + alpha * y); });
    case Arith::kSub:
      if constexpr (std::is_same_v<C, bool>) {
        return nullptr;  // refused at prepare time
      } else if constexpr (std::is_integral_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [alpha](C x, C y) {
          return static_cast<C>(static_cast<uint64_t>(x) -
                                static_cast<uint64_t>(alpha) * static_cast<uint64_t>(y));
        });
      } else {
        return MakeBinaryKernel<C, C>(
            a, b, out, compute, [alpha](C x, C y) { return C(x - alpha * y); });
      }
    case Arith::kMul:
      if constexpr (std::is_same_v<C, bool>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return C(x && y); });
      } else if constexpr (std::is_integral_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) {
          return static_cast<C>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
        });
      } else {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return C(x * y); });
      }
    case Arith::kDiv:
    case Arith::kAtan2:
    case Arith::kHypot:
    case Arith::kCopysign:
      if constexpr (std::is_floating_point_v<C>) {
        switch (kind) {
          case Arith::kDiv:
            return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return x / y; });
          case Arith::kAtan2:
            return MakeBinaryKernel<C, C>(a, b, out, compute,
                                          [](C x, C y) { return std::atan2(x, y); });
          case Arith::kHypot:
            return MakeBinaryKernel<C, C>(a, b, out, compute,
                                          [](C x, C y) { return std::hypot(x, y); });
          default:
            return MakeBinaryKernel<C, C>(a, b, out, compute,
                                          [](C x, C y) { return std::copysign(x, y); });
        }
      }
      return nullptr;  // computed in f32 (FloatResult)
    case Arith::kDivTrunc:
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return std::trunc(x / y); });
      } else if constexpr (std::is_same_v<C, int64_t>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) {
          return y == 0 ? C(0) : y == -1 ? static_cast<C>(0ull - static_cast<uint64_t>(x)) : C(x / y);
        });
      }
      return nullptr;
    case Arith::kDivFloor:
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return FloorDivF(x, y); });
      } else if constexpr (std::is_same_v<C, int64_t>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return FloorDivI(x, y); });
      }
      return nullptr;
    case Arith::kRemainder:
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return RemainderF(x, y); });
      } else if constexpr (std::is_same_v<C, int64_t>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return RemainderI(x, y); });
      }
      return nullptr;
    case Arith::kFmod:
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return std::fmod(x, y); });
      } else if constexpr (std::is_same_v<C, int64_t>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute,
                                      [](C x, C y) { return (y == 0 || y == -1) ? C(0) : C(x % y); });
      }
      return nullptr;
    case Arith::kPow:
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return std::pow(x, y); });
      } else if constexpr (std::is_same_v<C, int64_t>) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return PowI(x, y); });
      }
      return nullptr;
    case Arith::kBitOr:
    case Arith::kBitXor:
      if constexpr (std::is_floating_point_v<C>) {
        return nullptr;  // refused at prepare time
      } else if (kind == Arith::kBitOr) {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return C(x | y); });
      } else {
        return MakeBinaryKernel<C, C>(a, b, out, compute, [](C x, C y) { return C(x ^ y); });
      }
    case Arith::kFmax:
      return MakeBinaryKernel<C, C>(a, b, out, compute,
                                    [](C x, C y) { return IsNan(x) ? y : IsNan(y) ? x : MaxOf(x, y); });
    case Arith::kFmin:
      return MakeBinaryKernel<C, C>(a, b, out, compute,
                                    [](C x, C y) { return IsNan(x) ? y : IsNan(y) ? x : MinOf(x, y); });
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

absl::StatusOr<PreparedOp> PrepareArith(const NodeArgs& args, Arith kind,
                                        const char* other = "other") {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", /*allow_i32=*/true));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, other, /*allow_i32=*/true));
  if (!a.is_tensor && !b.is_tensor) return args.Error("one of self and other must be a tensor");
  if (!b.is_tensor && (kind == Arith::kMax || kind == Arith::kMin || kind == Arith::kFmax ||
                       kind == Arith::kFmin)) {
    return args.Error("other must be a tensor");
  }
  DType compute = PromoteOperands({&a, &b});
  if (FloatResult(kind)) compute = DType::kF32;
  if (Bitwise(kind) && compute == DType::kF32) {
    return args.Error("bitwise ops are not defined for floating-point operands");
  }
  if (compute == DType::kBool &&
      (kind == Arith::kDivTrunc || kind == Arith::kDivFloor || kind == Arith::kRemainder ||
       kind == Arith::kFmod || kind == Arith::kPow)) {
    return args.Unimplemented("this op on two bool operands is not supported");
  }
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
    case DType::kI32:  // add, sub, mul and the bitwise ops; others have no kernel
      op.kernel = ArithKernel<int32_t>(kind, a, b, shape, compute,
                                       static_cast<int32_t>(alpha));
      break;
    default:
      op.kernel = ArithKernel<bool>(kind, a, b, shape, compute, true);
      break;
  }
  if (op.kernel == nullptr) return args.Unimplemented("no kernel for these operand types");
  return op;
}

// clamp with bounds of any type (tensors that broadcast, numbers, or
// absent): out = min(max(x, lo), hi) in the promoted type; a NaN in x or
// in a bound gives NaN, as in ATen.
template <typename C>
class ClampKernel final : public Kernel {
 public:
  ClampKernel(StridedPlan plan, std::vector<OperandSource> src, C lo, C hi, size_t scratch,
              DType compute)
      : plan_(std::move(plan)), src_(std::move(src)), scalar_{lo, hi}, scratch_(scratch),
        compute_(compute) {}

  size_t ScratchBytes() const override { return scratch_; }

  absl::Status Run(const KernelContext& ctx) const override {
    const C* x = OperandData<C>(src_[0], nullptr, ctx, compute_);
    const C* lo = OperandData<C>(src_[1], &scalar_[0], ctx, compute_);
    const C* hi = OperandData<C>(src_[2], &scalar_[1], ctx, compute_);
    C* out = ctx.outputs[0].as<C>();
    const int64_t n = plan_.inner;
    const int64_t sx = plan_.inner_strides[0], sl = plan_.inner_strides[1],
                  sh = plan_.inner_strides[2];
    ForEachRow(plan_, [&](int64_t o, const int64_t* off) {
      const C* px = x + off[0];
      const C* pl = lo + off[1];
      const C* ph = hi + off[2];
      C* z = out + o;
      for (int64_t i = 0; i < n; ++i) {
        const C v = px[i * sx], l = pl[i * sl], h = ph[i * sh];
        if (IsNan(v) || IsNan(l) || IsNan(h)) {
          z[i] = IsNan(v) ? v : IsNan(l) ? l : h;
          continue;
        }
        const C y = v < l ? l : v;
        z[i] = y > h ? h : y;
      }
    });
    return absl::OkStatus();
  }

 private:
  StridedPlan plan_;
  std::vector<OperandSource> src_;
  C scalar_[2];
  size_t scratch_;
  DType compute_;
};

template <typename C>
std::unique_ptr<Kernel> MakeClamp(const Operand& x, const Operand& lo, const Operand& hi,
                                  const std::vector<int64_t>& out, DType compute, C lo_absent,
                                  C hi_absent, bool has_lo, bool has_hi) {
  std::vector<OperandSource> src;
  const size_t scratch = PlanOperandSources({&x, &lo, &hi}, compute, &src);
  StridedPlan plan = MakeStridedPlan(out, {BroadcastInputStrides(out, x.shape()),
                                           BroadcastInputStrides(out, lo.shape()),
                                           BroadcastInputStrides(out, hi.shape())});
  const C l = !has_lo ? lo_absent : lo.is_tensor ? C() : ScalarAs<C>(lo);
  const C h = !has_hi ? hi_absent : hi.is_tensor ? C() : ScalarAs<C>(hi);
  return std::make_unique<ClampKernel<C>>(std::move(plan), std::move(src), l, h, scratch,
                                          compute);
}

// A tensor of f32 with an f32 tensor or a number: elementwise.cc's kernel.
absl::StatusOr<bool> BothFloat(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", /*allow_i32=*/true));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other", /*allow_i32=*/true));
  return a.is_tensor && a.dtype == DType::kF32 && (!b.is_tensor || b.dtype == DType::kF32);
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareAddTensor(const NodeArgs& args) {
  // f32 tensor + (f32 tensor | number) stays on elementwise.cc's kernel,
  // which compile passes know how to fuse.
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", /*allow_i32=*/true));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other", /*allow_i32=*/true));
  if (a.is_tensor && a.dtype == DType::kF32 &&
      (!b.is_tensor || b.dtype == DType::kF32)) {
    return PrepareAdd(args);
  }
  return PrepareArith(args, Arith::kAdd);
}

absl::StatusOr<PreparedOp> PrepareSubTensor(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self", /*allow_i32=*/true));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other", /*allow_i32=*/true));
  if (a.is_tensor && a.dtype == DType::kF32 &&
      (!b.is_tensor || b.dtype == DType::kF32)) {
    return PrepareSub(args);
  }
  return PrepareArith(args, Arith::kSub);
}

absl::StatusOr<PreparedOp> PrepareTypedClamp(const NodeArgs& args) {
  // aten.clamp.default (self, min: Scalar?, max: Scalar?) on i64, and
  // aten.clamp.Tensor (self, min: Tensor?, max: Tensor?) on any type.
  KILN_ASSIGN_OR_RETURN(Operand x, ReadOperand(args, 0, "self"));
  if (!x.is_tensor) return args.Error("self must be a tensor");
  const bool has_lo = args.Find(1, "min") != nullptr, has_hi = args.Find(2, "max") != nullptr;
  if (!has_lo && !has_hi) return args.Error("at least one of 'min' or 'max' must not be None");
  Operand lo, hi;
  if (has_lo) {
    KILN_ASSIGN_OR_RETURN(lo, ReadOperand(args, 1, "min"));
  }
  if (has_hi) {
    KILN_ASSIGN_OR_RETURN(hi, ReadOperand(args, 2, "max"));
  }
  DType compute = x.dtype;
  if (has_lo) compute = PromoteTypes(compute, lo.dtype);
  if (has_hi) compute = PromoteTypes(compute, hi.dtype);
  if (compute == DType::kBool) return args.Unimplemented("clamp of bool is not supported");
  if (!has_lo) lo.dtype = compute;
  if (!has_hi) hi.dtype = compute;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastOperands(args, {&x, &lo, &hi}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{compute, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  if (compute == DType::kF32) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    op.kernel = MakeClamp<float>(x, lo, hi, shape, compute, -kInf, kInf, has_lo, has_hi);
  } else {
    op.kernel = MakeClamp<int64_t>(x, lo, hi, shape, compute,
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), has_lo, has_hi);
  }
  return op;
}

absl::StatusOr<PreparedOp> PrepareMulTensor(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(bool f32, BothFloat(args));
  return f32 ? PrepareMul(args) : PrepareArith(args, Arith::kMul);
}

absl::StatusOr<PreparedOp> PrepareDivTensor(const NodeArgs& args) {
  // True division: integers divide as floats.
  KILN_ASSIGN_OR_RETURN(bool f32, BothFloat(args));
  return f32 ? PrepareDiv(args) : PrepareArith(args, Arith::kDiv);
}

absl::StatusOr<PreparedOp> PrepareDivTensorMode(const NodeArgs& args) {
  // (self, other, *, rounding_mode: str?): None is true division.
  const Arg* mode = args.Find(2, "rounding_mode");
  if (mode == nullptr) return PrepareDivTensor(args);
  if (mode->kind != Arg::Kind::kString) return args.Error("rounding_mode must be a string");
  if (mode->s == "trunc") return PrepareArith(args, Arith::kDivTrunc);
  if (mode->s == "floor") return PrepareArith(args, Arith::kDivFloor);
  return args.Error(absl::StrCat("rounding_mode must be 'trunc', 'floor' or None, got '",
                                 mode->s, "'"));
}

absl::StatusOr<PreparedOp> PrepareRemainder(const NodeArgs& args) {
  return PrepareArith(args, Arith::kRemainder);
}

absl::StatusOr<PreparedOp> PrepareFmod(const NodeArgs& args) {
  return PrepareArith(args, Arith::kFmod);
}

absl::StatusOr<PreparedOp> PreparePowTensorTensor(const NodeArgs& args) {
  return PrepareArith(args, Arith::kPow, "exponent");
}

absl::StatusOr<PreparedOp> PreparePowScalar(const NodeArgs& args) {
  // (self: Scalar, exponent: Tensor)
  return PrepareArith(args, Arith::kPow, "exponent");
}

absl::StatusOr<PreparedOp> PrepareAtan2(const NodeArgs& args) {
  return PrepareArith(args, Arith::kAtan2);
}

absl::StatusOr<PreparedOp> PrepareHypot(const NodeArgs& args) {
  return PrepareArith(args, Arith::kHypot);
}

absl::StatusOr<PreparedOp> PrepareCopysign(const NodeArgs& args) {
  return PrepareArith(args, Arith::kCopysign);
}

absl::StatusOr<PreparedOp> PrepareBitwiseAnd(const NodeArgs& args) {
  return PrepareArith(args, Arith::kBitAnd);
}

absl::StatusOr<PreparedOp> PrepareBitwiseNot(const NodeArgs& args) {
  // ~x is x ^ all-ones (for bool: x ^ true).
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  if (!a.is_tensor) return args.Error("self must be a tensor");
  if (a.dtype == DType::kF32) return args.Error("bitwise_not is not defined for floating point");
  Operand ones;
  ones.dtype = a.dtype;
  ones.i = -1;
  PreparedOp op;
  op.outputs.push_back(a.meta);
  op.kernel = a.dtype == DType::kI64
                  ? ArithKernel<int64_t>(Arith::kBitXor, a, ones, a.meta.shape, a.dtype, 1)
                  : ArithKernel<bool>(Arith::kBitXor, a, ones, a.meta.shape, a.dtype, true);
  return op;
}

absl::StatusOr<PreparedOp> PrepareBitwiseOr(const NodeArgs& args) {
  return PrepareArith(args, Arith::kBitOr);
}

absl::StatusOr<PreparedOp> PrepareBitwiseXor(const NodeArgs& args) {
  return PrepareArith(args, Arith::kBitXor);
}

absl::StatusOr<PreparedOp> PrepareFmax(const NodeArgs& args) {
  return PrepareArith(args, Arith::kFmax);
}

absl::StatusOr<PreparedOp> PrepareFmin(const NodeArgs& args) {
  return PrepareArith(args, Arith::kFmin);
}

absl::StatusOr<PreparedOp> PrepareMaximum(const NodeArgs& args) {
  return PrepareArith(args, Arith::kMax);
}

absl::StatusOr<PreparedOp> PrepareMinimum(const NodeArgs& args) {
  return PrepareArith(args, Arith::kMin);
}

}  // namespace kiln::runtime
