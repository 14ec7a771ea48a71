// Comparisons, logical ops and selection over f32, i64 and bool with
// broadcasting and type promotion (typed_elementwise.h):
// aten.{eq,ne,lt,le,gt,ge}.{Scalar,Tensor}, aten.logical_{not,and,or,xor},
// aten.isnan, aten.isinf, aten.where.self. Comparisons run in the promoted
// type and give bool.
#include <cmath>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe, kAnd, kOr, kXor, kIsNan, kIsInf, kSignbit };

template <typename C>
bool IsInfOf(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isinf(x);
  } else {
    return false;
  }
}

template <typename C>
std::unique_ptr<Kernel> CompareKernel(Cmp cmp, const Operand& a,
                                      const Operand& b,
                                      const std::vector<int64_t>& out,
                                      DType compute) {
  switch (cmp) {
    case Cmp::kEq:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x == y; });
    case Cmp::kNe:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x != y; });
    case Cmp::kLt:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x < y; });
    case Cmp::kLe:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x <= y; });
    case Cmp::kGt:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x > y; });
    case Cmp::kGe:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x >= y; });
    case Cmp::kAnd:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x != C(0) && y != C(0); });
    case Cmp::kOr:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return x != C(0) || y != C(0); });
    case Cmp::kXor:
      return MakeBinaryKernel<C, bool>(a, b, out, compute,
                                       [](C x, C y) { return (x != C(0)) != (y != C(0)); });
    case Cmp::kIsNan:  // b is a dummy scalar
      return MakeBinaryKernel<C, bool>(a, b, out, compute, [](C x, C) { return x != x; });
    case Cmp::kIsInf:
      return MakeBinaryKernel<C, bool>(a, b, out, compute, [](C x, C) { return IsInfOf(x); });
    case Cmp::kSignbit:  // the sign bit: true for -0.0 and negative NaNs too
      if constexpr (std::is_floating_point_v<C>) {
        return MakeBinaryKernel<C, bool>(a, b, out, compute, [](C x, C) { return std::signbit(x); });
      } else {
        return MakeBinaryKernel<C, bool>(a, b, out, compute, [](C x, C) { return x < C(0); });
      }
  }
  return nullptr;
}

absl::StatusOr<PreparedOp> PrepareCompare(const NodeArgs& args, Cmp cmp) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  if (!a.is_tensor) return args.Error("self must be a tensor");
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other"));
  const DType compute = PromoteTypes(a.dtype, b.dtype);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        BroadcastOperands(args, {&a, &b}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kBool, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  switch (compute) {
    case DType::kF32:
      op.kernel = CompareKernel<float>(cmp, a, b, shape, compute);
      break;
    case DType::kI64:
      op.kernel = CompareKernel<int64_t>(cmp, a, b, shape, compute);
      break;
    default:
      op.kernel = CompareKernel<bool>(cmp, a, b, shape, compute);
      break;
  }
  return op;
}

// out = cond ? a : b over the broadcast of three operands.
template <typename C>
class WhereKernel final : public Kernel {
 public:
  WhereKernel(StridedPlan plan, std::vector<OperandSource> src, C sa, C sb,
              size_t scratch, DType compute)
      : plan_(std::move(plan)),
        src_(std::move(src)),
        scalar_{sa, sb},
        scratch_(scratch),
        compute_(compute) {}

  size_t ScratchBytes() const override { return scratch_; }

  absl::Status Run(const KernelContext& ctx) const override {
    const bool* c = ctx.inputs[src_[0].slot].as<const bool>();
    const C* a = OperandData<C>(src_[1], &scalar_[0], ctx, compute_);
    const C* b = OperandData<C>(src_[2], &scalar_[1], ctx, compute_);
    C* out = ctx.outputs[0].as<C>();
    const int64_t n = plan_.inner;
    const int64_t sc = plan_.inner_strides[0], sa = plan_.inner_strides[1],
                  sb = plan_.inner_strides[2];
    ForEachRow(plan_, [&](int64_t o, const int64_t* off) {
      const bool* pc = c + off[0];
      const C* pa = a + off[1];
      const C* pb = b + off[2];
      C* z = out + o;
      if (sc == 1 && sa == 0 && sb == 0) {  // masks: where(mask, 0, -inf)
        const C va = *pa, vb = *pb;
        for (int64_t i = 0; i < n; ++i) z[i] = pc[i] ? va : vb;
      } else if (sc == 1 && sa == 1 && sb == 1) {
        for (int64_t i = 0; i < n; ++i) z[i] = pc[i] ? pa[i] : pb[i];
      } else {
        for (int64_t i = 0; i < n; ++i) {
          z[i] = pc[i * sc] ? pa[i * sa] : pb[i * sb];
        }
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
std::unique_ptr<Kernel> MakeWhere(const Operand& c, const Operand& a,
                                  const Operand& b,
                                  const std::vector<int64_t>& out,
                                  DType compute) {
  std::vector<OperandSource> src;
  // The condition is always bool, so it is never converted.
  const size_t scratch = PlanOperandSources({&c, &a, &b}, compute, &src);
  src[0].convert = false;
  StridedPlan plan = MakeStridedPlan(
      out, {BroadcastInputStrides(out, c.shape()),
            BroadcastInputStrides(out, a.shape()),
            BroadcastInputStrides(out, b.shape())});
  return std::make_unique<WhereKernel<C>>(
      std::move(plan), std::move(src), a.is_tensor ? C() : ScalarAs<C>(a),
      b.is_tensor ? C() : ScalarAs<C>(b), scratch, compute);
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareEqScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kEq);
}
absl::StatusOr<PreparedOp> PrepareEqTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kEq);
}
absl::StatusOr<PreparedOp> PrepareNeScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kNe);
}
absl::StatusOr<PreparedOp> PrepareLtScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kLt);
}
absl::StatusOr<PreparedOp> PrepareLeScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kLe);
}
absl::StatusOr<PreparedOp> PrepareGtScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kGt);
}
absl::StatusOr<PreparedOp> PrepareGeScalar(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kGe);
}
absl::StatusOr<PreparedOp> PrepareNeTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kNe);
}
absl::StatusOr<PreparedOp> PrepareLtTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kLt);
}
absl::StatusOr<PreparedOp> PrepareLeTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kLe);
}
absl::StatusOr<PreparedOp> PrepareGtTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kGt);
}
absl::StatusOr<PreparedOp> PrepareGeTensor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kGe);
}

absl::StatusOr<PreparedOp> PrepareLogicalAnd(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kAnd);
}
absl::StatusOr<PreparedOp> PrepareLogicalOr(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kOr);
}
absl::StatusOr<PreparedOp> PrepareLogicalXor(const NodeArgs& args) {
  return PrepareCompare(args, Cmp::kXor);
}

// A predicate of one tensor, as a comparison with a dummy zero in its type:
// logical_not(x) == (x == 0); isnan and isinf ignore the zero.
absl::StatusOr<PreparedOp> PrepareUnaryPredicate(const NodeArgs& args, Cmp cmp) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  if (!a.is_tensor) return args.Error("self must be a tensor");
  Operand zero;
  zero.dtype = a.dtype;
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kBool, a.meta.shape});
  switch (a.dtype) {
    case DType::kF32:
      op.kernel = CompareKernel<float>(cmp, a, zero, a.meta.shape, a.dtype);
      break;
    case DType::kI64:
      op.kernel = CompareKernel<int64_t>(cmp, a, zero, a.meta.shape, a.dtype);
      break;
    default:
      op.kernel = CompareKernel<bool>(cmp, a, zero, a.meta.shape, a.dtype);
      break;
  }
  return op;
}

absl::StatusOr<PreparedOp> PrepareLogicalNot(const NodeArgs& args) {
  return PrepareUnaryPredicate(args, Cmp::kEq);
}
absl::StatusOr<PreparedOp> PrepareIsnan(const NodeArgs& args) {
  return PrepareUnaryPredicate(args, Cmp::kIsNan);
}
absl::StatusOr<PreparedOp> PrepareIsinf(const NodeArgs& args) {
  return PrepareUnaryPredicate(args, Cmp::kIsInf);
}
absl::StatusOr<PreparedOp> PrepareSignbit(const NodeArgs& args) {
  return PrepareUnaryPredicate(args, Cmp::kSignbit);
}

absl::StatusOr<PreparedOp> PrepareWhere(const NodeArgs& args) {
  // (condition, self, other)
  KILN_ASSIGN_OR_RETURN(Operand c, ReadOperand(args, 0, "condition"));
  if (!c.is_tensor || c.dtype != DType::kBool) {
    return args.Error("condition must be a bool tensor");
  }
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 1, "self"));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 2, "other"));
  if (!a.is_tensor || !b.is_tensor) {
    return args.Error("self and other must be tensors (where.self)");
  }
  const DType compute = PromoteTypes(a.dtype, b.dtype);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape,
                        BroadcastOperands(args, {&c, &a, &b}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{compute, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  switch (compute) {
    case DType::kF32:
      op.kernel = MakeWhere<float>(c, a, b, shape, compute);
      break;
    case DType::kI64:
      op.kernel = MakeWhere<int64_t>(c, a, b, shape, compute);
      break;
    default:
      op.kernel = MakeWhere<bool>(c, a, b, shape, compute);
      break;
  }
  return op;
}

}  // namespace kiln::runtime
