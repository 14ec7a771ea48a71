// Elementwise f32 arithmetic: aten.add.Tensor / aten.sub.Tensor (NumPy
// broadcasting, scalar `other`, alpha), aten.mul.Tensor / aten.div.Tensor
// (broadcasting, scalar `other`), aten.mul.Scalar and aten.relu.default.
//
// Each binary op is one functor; the Run switch picks it once per call, and
// BroadcastApply gives every stride pattern its own plain loop.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kGrain = int64_t{1} << 15;

// The arithmetic of one binary op. Sub is add with alpha negated; alpha
// other than 1 is applied to `other` first, in float, like ATen.
enum class BinaryOp { kAdd, kMul, kDiv };

// self (op) alpha * other for two tensors.
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(BinaryOp op, BroadcastPlan plan, float alpha, int self_index,
               int other_index)
      : op_(op),
        plan_(std::move(plan)),
        alpha_(alpha),
        self_index_(self_index),
        other_index_(other_index) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* a = ctx.inputs[self_index_].as<const float>();
    const float* b = ctx.inputs[other_index_].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const float alpha = alpha_;
    switch (op_) {
      case BinaryOp::kAdd:
        if (alpha == 1.0f) {
          BroadcastApply(plan_, a, b, out,
                         [](float x, float y) { return x + y; });
        } else {
          BroadcastApply(plan_, a, b, out,
                         [alpha](float x, float y) { return x + alpha * y; });
        }
        break;
      case BinaryOp::kMul:
        BroadcastApply(plan_, a, b, out,
                       [](float x, float y) { return x * y; });
        break;
      case BinaryOp::kDiv:
        BroadcastApply(plan_, a, b, out,
                       [](float x, float y) { return x / y; });
        break;
    }
    return absl::OkStatus();
  }

 private:
  BinaryOp op_;
  BroadcastPlan plan_;
  float alpha_;
  int self_index_, other_index_;
};

// self (op) c for a number c folded at prepare time.
class BinaryScalarKernel final : public Kernel {
 public:
  BinaryScalarKernel(BinaryOp op, float c, int64_t n) : op_(op), c_(c), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* a = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const float c = c_;
    const BinaryOp op = op_;
    ParallelFor(n_, kGrain, [&](int64_t begin, int64_t end) {
      switch (op) {
        case BinaryOp::kAdd:
          for (int64_t i = begin; i < end; ++i) out[i] = a[i] + c;
          break;
        case BinaryOp::kMul:
          for (int64_t i = begin; i < end; ++i) out[i] = a[i] * c;
          break;
        case BinaryOp::kDiv:
          for (int64_t i = begin; i < end; ++i) out[i] = a[i] / c;
          break;
      }
    });
    return absl::OkStatus();
  }

 private:
  BinaryOp op_;
  float c_;
  int64_t n_;
};

class ReluKernel final : public Kernel {
 public:
  explicit ReluKernel(int64_t n) : n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ParallelFor(n_, kGrain, [&](int64_t begin, int64_t end) {
      // `x < 0 ? 0 : x` keeps NaN, like ATen's clamp_min.
      for (int64_t i = begin; i < end; ++i) {
        const float x = in[i];
        out[i] = x < 0.0f ? 0.0f : x;
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_;
};

// (self, other, *, alpha=1) for add/sub, (self, other) for mul/div.
// `other_sign` is -1 for sub.
absl::StatusOr<PreparedOp> PrepareBinary(const NodeArgs& args, BinaryOp op,
                                         bool has_alpha, float other_sign) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  double alpha = 1.0;
  if (has_alpha) {
    KILN_ASSIGN_OR_RETURN(alpha, args.Float(2, "alpha", 1.0));
  }
  // ATen computes alpha * other in the op's math type (float here).
  const float falpha = other_sign * static_cast<float>(alpha);
  const Arg* other = args.Find(1, "other");
  if (other == nullptr) return args.Error("missing argument other");
  PreparedOp op_out;
  if (other->kind == Arg::Kind::kInt || other->kind == Arg::Kind::kFloat) {
    const double value = other->kind == Arg::Kind::kInt
                             ? static_cast<double>(other->i)
                             : other->f;
    const float c = op == BinaryOp::kAdd
                        ? falpha * static_cast<float>(value)
                        : static_cast<float>(value);
    op_out.outputs.push_back(self);
    op_out.kernel =
        std::make_unique<BinaryScalarKernel>(op, c, self.NumElements());
    return op_out;
  }
  if (other->kind != Arg::Kind::kTensor) {
    return args.Error("other must be a tensor or a number");
  }
  KILN_ASSIGN_OR_RETURN(TensorMeta other_meta, args.Tensor(1, "other"));
  KILN_RETURN_IF_ERROR(RequireDType(args, other_meta, "other"));
  std::optional<std::vector<int64_t>> shape =
      BroadcastShapes(self.shape, other_meta.shape);
  if (!shape) {
    return args.Error(absl::StrCat("shapes ", self.ToString(), " and ",
                                   other_meta.ToString(),
                                   " are not broadcastable"));
  }
  TensorMeta out{DType::kF32, *shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  op_out.outputs.push_back(out);
  op_out.kernel = std::make_unique<BinaryKernel>(
      op, MakeBroadcastPlan(*shape, self.shape, other_meta.shape), falpha,
      InputIndex(args, 0, "self"), InputIndex(args, 1, "other"));
  return op_out;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareAdd(const NodeArgs& args) {
  return PrepareBinary(args, BinaryOp::kAdd, /*has_alpha=*/true, 1.0f);
}

absl::StatusOr<PreparedOp> PrepareSub(const NodeArgs& args) {
  return PrepareBinary(args, BinaryOp::kAdd, /*has_alpha=*/true, -1.0f);
}

absl::StatusOr<PreparedOp> PrepareMul(const NodeArgs& args) {
  return PrepareBinary(args, BinaryOp::kMul, /*has_alpha=*/false, 1.0f);
}

absl::StatusOr<PreparedOp> PrepareDiv(const NodeArgs& args) {
  return PrepareBinary(args, BinaryOp::kDiv, /*has_alpha=*/false, 1.0f);
}

absl::StatusOr<PreparedOp> PrepareRelu(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<ReluKernel>(self.NumElements());
  return op;
}

}  // namespace kiln::runtime
