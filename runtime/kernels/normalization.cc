// Normalizations over f32 tensors that return their statistics too:
//   aten.native_layer_norm.default (input, normalized_shape, weight?,
//     bias?, eps) -> (out, mean, rstd), stats shaped input[:axis] + [1]*k;
//   aten.native_group_norm.default (input, weight?, bias?, N, C, HxW,
//     group, eps) -> (out, mean [N, group], rstd [N, group]).
// Each normalized group is contiguous; statistics accumulate in double
// (two passes: mean, then centred variance), so they are at least as
// accurate as ATen's float Welford.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Mean and 1/sqrt(var + eps) of n contiguous floats.
inline void Moments(const float* x, int64_t n, double eps, float* mean_out,
                    float* rstd_out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    sq += d * d;
  }
  const double var = n > 0 ? sq / static_cast<double>(n) : 0.0;
  *mean_out = static_cast<float>(mean);
  *rstd_out = static_cast<float>(1.0 / std::sqrt(var + eps));
}

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(int64_t rows, int64_t cols, double eps, int x_slot,
                  int w_slot, int b_slot)
      : rows_(rows), cols_(cols), eps_(eps), x_(x_slot), w_(w_slot), b_(b_slot) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[x_].as<const float>();
    const float* w = w_ >= 0 ? ctx.inputs[w_].as<const float>() : nullptr;
    const float* bias = b_ >= 0 ? ctx.inputs[b_].as<const float>() : nullptr;
    float* out = ctx.outputs[0].as<float>();
    float* mean = ctx.outputs[1].as<float>();
    float* rstd = ctx.outputs[2].as<float>();
    const int64_t m = cols_;
    ParallelFor(rows_, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(m, 1)),
                [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* xr = x + r * m;
        float* yr = out + r * m;
        Moments(xr, m, eps_, &mean[r], &rstd[r]);
        const float mu = mean[r], rs = rstd[r];
        if (w != nullptr && bias != nullptr) {
          for (int64_t i = 0; i < m; ++i) yr[i] = (xr[i] - mu) * rs * w[i] + bias[i];
        } else {
          for (int64_t i = 0; i < m; ++i) {
            float v = (xr[i] - mu) * rs;
            if (w != nullptr) v *= w[i];
            if (bias != nullptr) v += bias[i];
            yr[i] = v;
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t rows_, cols_;
  double eps_;
  int x_, w_, b_;
};

class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(int64_t n, int64_t c, int64_t hw, int64_t groups, double eps,
                  int x_slot, int w_slot, int b_slot)
      : n_(n), c_(c), hw_(hw), g_(groups), eps_(eps), x_(x_slot), w_(w_slot), b_(b_slot) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[x_].as<const float>();
    const float* w = w_ >= 0 ? ctx.inputs[w_].as<const float>() : nullptr;
    const float* bias = b_ >= 0 ? ctx.inputs[b_].as<const float>() : nullptr;
    float* out = ctx.outputs[0].as<float>();
    float* mean = ctx.outputs[1].as<float>();
    float* rstd = ctx.outputs[2].as<float>();
    const int64_t cpg = c_ / g_;
    const int64_t group_elems = cpg * hw_;
    ParallelFor(n_ * g_, 1, [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const float* xg = x + ng * group_elems;
        float* yg = out + ng * group_elems;
        Moments(xg, group_elems, eps_, &mean[ng], &rstd[ng]);
        const float mu = mean[ng], rs = rstd[ng];
        const int64_t c0 = (ng % g_) * cpg;
        for (int64_t c = 0; c < cpg; ++c) {
          // y = x * scale + shift per channel.
          const float wc = w != nullptr ? w[c0 + c] : 1.0f;
          const float bc = bias != nullptr ? bias[c0 + c] : 0.0f;
          const float scale = rs * wc;
          const float shift = bc - mu * scale;
          const float* xc = xg + c * hw_;
          float* yc = yg + c * hw_;
          for (int64_t i = 0; i < hw_; ++i) yc[i] = xc[i] * scale + shift;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_, c_, hw_, g_;
  double eps_;
  int x_, w_, b_;
};

absl::Status RequireVector(const NodeArgs& args,
                           const std::optional<TensorMeta>& t,
                           const std::vector<int64_t>& shape,
                           const char* name) {
  if (!t) return absl::OkStatus();
  KILN_RETURN_IF_ERROR(RequireDType(args, *t, name));
  if (t->shape != shape) {
    return args.Error(absl::StrCat(name, " must have shape ",
                                   ShapeString(shape), ", got ",
                                   t->ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareNativeLayerNorm(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> normalized,
                        args.IntList(1, "normalized_shape"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> weight,
                        args.OptionalTensor(2, "weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias,
                        args.OptionalTensor(3, "bias"));
  KILN_ASSIGN_OR_RETURN(double eps, args.Float(4, "eps"));
  const int k = static_cast<int>(normalized.size());
  const int axis = input.rank() - k;
  if (k == 0 || axis < 0 ||
      !std::equal(normalized.begin(), normalized.end(),
                  input.shape.begin() + axis)) {
    return args.Error(absl::StrCat("normalized_shape ",
                                   ShapeString(normalized),
                                   " must be a non-empty suffix of ",
                                   input.ToString()));
  }
  KILN_RETURN_IF_ERROR(RequireVector(args, weight, normalized, "weight"));
  KILN_RETURN_IF_ERROR(RequireVector(args, bias, normalized, "bias"));
  std::vector<int64_t> stat_shape(input.shape.begin(),
                                  input.shape.begin() + axis);
  stat_shape.insert(stat_shape.end(), k, 1);
  PreparedOp op;
  op.outputs = {input, TensorMeta{DType::kF32, stat_shape},
                TensorMeta{DType::kF32, stat_shape}};
  op.kernel = std::make_unique<LayerNormKernel>(
      Product(input.shape, 0, axis), Product(input.shape, axis, input.rank()),
      eps, InputIndex(args, 0, "input"), InputIndex(args, 2, "weight"),
      InputIndex(args, 3, "bias"));
  return op;
}

absl::StatusOr<PreparedOp> PrepareNativeGroupNorm(const NodeArgs& args) {
  // (input, weight?, bias?, N, C, HxW, group, eps)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> weight,
                        args.OptionalTensor(1, "weight"));
  KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> bias,
                        args.OptionalTensor(2, "bias"));
  KILN_ASSIGN_OR_RETURN(int64_t n, args.Int(3, "N"));
  KILN_ASSIGN_OR_RETURN(int64_t c, args.Int(4, "C"));
  KILN_ASSIGN_OR_RETURN(int64_t hw, args.Int(5, "HxW"));
  KILN_ASSIGN_OR_RETURN(int64_t group, args.Int(6, "group"));
  KILN_ASSIGN_OR_RETURN(double eps, args.Float(7, "eps"));
  if (input.rank() < 2 || input.shape[0] != n || input.shape[1] != c ||
      Product(input.shape, 2, input.rank()) != hw) {
    return args.Error(absl::StrCat("input ", input.ToString(),
                                   " does not match N=", n, ", C=", c,
                                   ", HxW=", hw));
  }
  if (group <= 0 || c % group != 0) {
    return args.Error(absl::StrCat("C=", c, " is not divisible by group=",
                                   group));
  }
  KILN_RETURN_IF_ERROR(RequireVector(args, weight, {c}, "weight"));
  KILN_RETURN_IF_ERROR(RequireVector(args, bias, {c}, "bias"));
  PreparedOp op;
  op.outputs = {input, TensorMeta{DType::kF32, {n, group}},
                TensorMeta{DType::kF32, {n, group}}};
  op.kernel = std::make_unique<GroupNormKernel>(
      n, c, hw, group, eps, InputIndex(args, 0, "input"),
      InputIndex(args, 1, "weight"), InputIndex(args, 2, "bias"));
  return op;
}

}  // namespace kiln::runtime
