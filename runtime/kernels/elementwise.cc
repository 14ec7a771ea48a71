// Elementwise f32 ops: aten.add.Tensor (NumPy broadcasting, scalar `other`,
// alpha) and aten.relu.default.
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

// self + alpha * other for two tensors.
class AddKernel final : public Kernel {
 public:
  AddKernel(BroadcastPlan plan, float alpha, int self_index, int other_index)
      : plan_(std::move(plan)),
        alpha_(alpha),
        self_index_(self_index),
        other_index_(other_index) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* a = ctx.inputs[self_index_].as<const float>();
    const float* b = ctx.inputs[other_index_].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    if (alpha_ == 1.0f) {
      BroadcastApply(plan_, a, b, out, [](float x, float y) { return x + y; });
    } else {
      const float alpha = alpha_;
      BroadcastApply(plan_, a, b, out,
                     [alpha](float x, float y) { return x + alpha * y; });
    }
    return absl::OkStatus();
  }

 private:
  BroadcastPlan plan_;
  float alpha_;
  int self_index_, other_index_;
};

// self + c, where c = alpha * other was folded at prepare time.
class AddScalarKernel final : public Kernel {
 public:
  AddScalarKernel(float c, int64_t n) : c_(c), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* a = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const float c = c_;
    ParallelFor(n_, kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = a[i] + c;
    });
    return absl::OkStatus();
  }

 private:
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

}  // namespace

absl::StatusOr<PreparedOp> PrepareAdd(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(double alpha, args.Float(2, "alpha", 1.0));
  const Arg* other = args.Find(1, "other");
  if (other == nullptr) return args.Error("missing argument other");
  PreparedOp op;
  if (other->kind == Arg::Kind::kInt || other->kind == Arg::Kind::kFloat) {
    const double value = other->kind == Arg::Kind::kInt
                             ? static_cast<double>(other->i)
                             : other->f;
    // ATen computes alpha * other in the op's math type (float here).
    const float c = static_cast<float>(alpha) * static_cast<float>(value);
    op.outputs.push_back(self);
    op.kernel = std::make_unique<AddScalarKernel>(c, self.NumElements());
    return op;
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
  op.outputs.push_back(out);
  op.kernel = std::make_unique<AddKernel>(
      MakeBroadcastPlan(*shape, self.shape, other_meta.shape),
      static_cast<float>(alpha), InputIndex(args, 0, "self"),
      InputIndex(args, 1, "other"));
  return op;
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
