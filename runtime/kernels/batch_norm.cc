// Inference batch normalization: aten.native_batch_norm.default with
// training=False (training=True is batch_norm_stats.cc's) and aten._native_batch_norm_legit_no_training.default, and
// their channels-last form kiln.batch_norm_nhwc (input, weight, bias,
// running_mean, running_var, eps, post_ops=[]; one output) that
// passes/channels_last.cc uses when nothing reads the saved statistics.
// post_ops are activations passes/fuse_batch_norm_activation.cc moved in
// (densenet's norm -> relu before each convolution), applied to each row
// of channels while it is in L1 instead of in a pass of their own.
//
// out = (x - mean) / sqrt(var + eps) * weight + bias, folded per channel to
// out = x * scale + shift. With constant parameters the fold happens once at
// prepare time. The second and third outputs (save_mean, save_invstd) are
// empty f32[0] tensors, as eager returns when not training.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

struct BatchNormParams {
  int64_t outer = 0;     // N
  int64_t channels = 0;  // C
  int64_t inner = 0;     // product of the dims after C
  float eps = 0.0f;
  // Channels are the last dim (outer = N*H*W, inner = 1).
  bool channels_last = false;
  // Indices in KernelContext::inputs, -1 when absent (weight 1, bias 0).
  int input = -1, weight = -1, bias = -1, mean = -1, var = -1;
  // Prepared scale/shift when all present parameters are constants.
  std::vector<float> scale, shift;
  // Activations applied to the result (channels-last form only).
  std::vector<PostOp> post_ops;
};

// Per-channel scale/shift from the parameters, in float like ATen's
// batch_norm_cpu_collect_linear_and_constant_terms.
void FoldParams(int64_t c, float eps, const float* weight, const float* bias,
                const float* mean, const float* var, float* scale,
                float* shift) {
  for (int64_t i = 0; i < c; ++i) {
    const float invstd = 1.0f / std::sqrt(var[i] + eps);
    const float w = weight ? weight[i] : 1.0f;
    const float b = bias ? bias[i] : 0.0f;
    scale[i] = invstd * w;
    shift[i] = b - mean[i] * scale[i];
  }
}

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(BatchNormParams p) : p_(std::move(p)) {}

  size_t ScratchBytes() const override {
    return p_.scale.empty() ? 2 * p_.channels * sizeof(float) : 0;
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const float* scale = p_.scale.data();
    const float* shift = p_.shift.data();
    if (p_.scale.empty()) {
      auto in = [&](int index) {
        return index < 0 ? nullptr : ctx.inputs[index].as<const float>();
      };
      float* s = static_cast<float*>(ctx.scratch);
      float* t = s + p_.channels;
      FoldParams(p_.channels, p_.eps, in(p_.weight), in(p_.bias), in(p_.mean),
                 in(p_.var), s, t);
      scale = s;
      shift = t;
    }
    const float* x = ctx.inputs[p_.input].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const int64_t c = p_.channels, inner = p_.inner;
    if (p_.channels_last) {
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(c, 1));
      ParallelFor(p_.outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const float* src = x + row * c;
          float* dst = out + row * c;
          for (int64_t k = 0; k < c; ++k) dst[k] = src[k] * scale[k] + shift[k];
          if (!p_.post_ops.empty()) ApplyPostOps(p_.post_ops, dst, c);
        }
      });
      return absl::OkStatus();
    }
    const int64_t planes = p_.outer * c;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(inner, 1));
    ParallelFor(planes, grain, [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float a = scale[plane % c], b = shift[plane % c];
        const float* src = x + plane * inner;
        float* dst = out + plane * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] = src[i] * a + b;
      }
    });
    return absl::OkStatus();
  }

 private:
  BatchNormParams p_;
};

// kiln.batch_norm_nhwc's arguments (ops.def) past ATen's first five
// (input, weight, bias, running_mean, running_var), which it shares.
static_assert(KILN_ARG("kiln.batch_norm_nhwc", "input").pos == 0 &&
                  KILN_ARG("kiln.batch_norm_nhwc", "running_var").pos == 4,
              "kiln.batch_norm_nhwc starts with ATen batch norm's arguments");

// Shared by every overload: arguments at (weight..var) = positions 1..4 and
// eps at `eps_pos`; post_ops for the channels-last one.
absl::StatusOr<PreparedOp> PrepareInferenceBatchNorm(const NodeArgs& args,
                                                     int eps_pos, bool channels_last) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  if (input.rank() < 2) {
    return args.Error(absl::StrCat(
        "input must have rank >= 2 (N, C, ...), got ", input.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(double eps, args.Float(eps_pos, "eps"));
  if (!(eps >= 0.0)) {
    return args.Error(absl::StrCat("eps must be non-negative, got ", eps));
  }
  if (channels_last && input.rank() != 4) {
    return args.Error(absl::StrCat("expected a 4-D channels-last input, got ", input.ToString()));
  }
  const int64_t c = input.shape[channels_last ? 3 : 1];
  struct Param {
    int pos;
    const char* name;
    int* index;
    const float* constant = nullptr;
  };
  BatchNormParams p;
  p.channels_last = channels_last;
  p.outer = channels_last ? Product(input.shape, 0, 3) : input.shape[0];
  p.channels = c;
  p.inner = channels_last ? 1 : Product(input.shape, 2, input.rank());
  p.eps = static_cast<float>(eps);
  p.input = InputIndex(args, 0, "input");
  Param params[] = {{1, "weight", &p.weight},
                    {2, "bias", &p.bias},
                    {3, "running_mean", &p.mean},
                    {4, "running_var", &p.var}};
  bool all_constant = true;
  for (Param& param : params) {
    KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> meta,
                          args.OptionalTensor(param.pos, param.name));
    if (!meta) {
      if (param.pos >= 3) {
        // ATen requires running stats when not training.
        return args.Error(absl::StrCat(
            param.name, " is required for inference batch norm"));
      }
      continue;
    }
    KILN_RETURN_IF_ERROR(RequireDType(args, *meta, param.name));
    if (meta->rank() != 1 || meta->shape[0] != c) {
      return args.Error(absl::StrCat(param.name, " must have shape [", c,
                                     "] for input ", input.ToString(),
                                     ", got ", meta->ToString()));
    }
    *param.index = InputIndex(args, param.pos, param.name);
    param.constant =
        static_cast<const float*>(args.ConstantData(param.pos, param.name));
    if (param.constant == nullptr) all_constant = false;
  }
  if (all_constant) {
    p.scale.resize(c);
    p.shift.resize(c);
    FoldParams(c, p.eps, params[0].constant, params[1].constant,
               params[2].constant, params[3].constant, p.scale.data(),
               p.shift.data());
  }
  if (channels_last) {
    KILN_ASSIGN_OR_RETURN(p.post_ops, ParsePostOps(args, batch_norm_nhwc_arg::kPostOps));
    if (!LoopsImplement(p.post_ops)) {
      return args.Unimplemented("batch norm post-ops must be activations");
    }
  }
  PreparedOp op;
  op.outputs = {input};
  if (!channels_last) {
    op.outputs.push_back(TensorMeta{DType::kF32, {0}});
    op.outputs.push_back(TensorMeta{DType::kF32, {0}});
  }
  op.kernel = std::make_unique<BatchNormKernel>(std::move(p));
  return op;
}

}  // namespace

// batch_norm_stats.cc: training=True, the batch's own statistics.
absl::StatusOr<PreparedOp> PrepareBatchStatsNorm(const NodeArgs& args);

absl::StatusOr<PreparedOp> PrepareNativeBatchNorm(const NodeArgs& args) {
  // (input, weight?, bias?, running_mean?, running_var?, training, momentum,
  //  eps)
  KILN_ASSIGN_OR_RETURN(bool training, args.Bool(5, "training", false));
  if (training) return PrepareBatchStatsNorm(args);
  KILN_ASSIGN_OR_RETURN(double momentum, args.Float(6, "momentum", 0.1));
  (void)momentum;  // only used to update running stats when training
  return PrepareInferenceBatchNorm(args, 7, false);
}

absl::StatusOr<PreparedOp> PrepareBatchNormLegitNoTraining(
    const NodeArgs& args) {
  // (input, weight?, bias?, running_mean, running_var, momentum, eps)
  KILN_ASSIGN_OR_RETURN(double momentum, args.Float(5, "momentum", 0.1));
  (void)momentum;
  return PrepareInferenceBatchNorm(args, 6, false);
}

absl::StatusOr<PreparedOp> PrepareBatchNormNhwc(const NodeArgs& args) {
  return PrepareInferenceBatchNorm(args, static_cast<int>(batch_norm_nhwc_arg::kEps.pos), true);
}

}  // namespace kiln::runtime
