// Batch normalization with the batch's own statistics:
// aten.native_batch_norm.default with training=True and no running stats
// (weight standardization, as NFNets do it to their constant weights:
// F.batch_norm(w, None, None, training=True)). With running stats ATen
// would also update them in place, which a compiled graph cannot express:
// refused.
//
// Per channel c of an [N, C, *] input: mean and biased variance over N and
// the spatial dims (two passes, in double), then
// out = (x - mean) * invstd * weight + bias; the second and third outputs
// are mean and invstd ([C]), as ATen returns them.
#include <cmath>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

class BatchStatsNormKernel final : public Kernel {
 public:
  BatchStatsNormKernel(int64_t n, int64_t c, int64_t inner, double eps, int weight, int bias)
      : n_(n), c_(c), inner_(inner), eps_(eps), weight_(weight), bias_(bias) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    const float* w = weight_ >= 0 ? ctx.inputs[weight_].as<const float>() : nullptr;
    const float* b = bias_ >= 0 ? ctx.inputs[bias_].as<const float>() : nullptr;
    float* out = ctx.outputs[0].as<float>();
    float* save_mean = ctx.outputs[1].as<float>();
    float* save_invstd = ctx.outputs[2].as<float>();
    const int64_t count = n_ * inner_;
    ParallelFor(c_, 1, [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        double sum = 0;
        for (int64_t i = 0; i < n_; ++i) {
          const float* row = x + (i * c_ + ch) * inner_;
          for (int64_t k = 0; k < inner_; ++k) sum += row[k];
        }
        const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
        double sq = 0;
        for (int64_t i = 0; i < n_; ++i) {
          const float* row = x + (i * c_ + ch) * inner_;
          for (int64_t k = 0; k < inner_; ++k) {
            const double d = row[k] - mean;
            sq += d * d;
          }
        }
        const double var = count > 0 ? sq / static_cast<double>(count) : 0.0;
        const double invstd = 1.0 / std::sqrt(var + eps_);
        save_mean[ch] = static_cast<float>(mean);
        save_invstd[ch] = static_cast<float>(invstd);
        const double scale = invstd * (w != nullptr ? w[ch] : 1.0);
        const double shift = (b != nullptr ? b[ch] : 0.0) - mean * scale;
        const float fs = static_cast<float>(scale), fb = static_cast<float>(shift);
        for (int64_t i = 0; i < n_; ++i) {
          const float* row = x + (i * c_ + ch) * inner_;
          float* y = out + (i * c_ + ch) * inner_;
          for (int64_t k = 0; k < inner_; ++k) y[k] = row[k] * fs + fb;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_, c_, inner_;
  double eps_;
  int weight_, bias_;
};

}  // namespace

// batch_norm.cc's aten.native_batch_norm.default hands training=True here.
absl::StatusOr<PreparedOp> PrepareBatchStatsNorm(const NodeArgs& args) {
  // (input, weight?, bias?, running_mean?, running_var?, training, momentum, eps)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "input"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "input"));
  if (input.rank() < 2) {
    return args.Error(absl::StrCat("input must have a channel dim, got ", input.ToString()));
  }
  if (args.Find(3, "running_mean") != nullptr || args.Find(4, "running_var") != nullptr) {
    return args.Unimplemented(
        "training=True with running stats (ATen updates them in place) is not supported");
  }
  KILN_ASSIGN_OR_RETURN(double eps, args.Float(7, "eps"));
  const int64_t c = input.shape[1];
  int slots[2] = {-1, -1};
  const char* names[2] = {"weight", "bias"};
  for (int i = 0; i < 2; ++i) {
    KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> meta, args.OptionalTensor(1 + i, names[i]));
    if (!meta) continue;
    KILN_RETURN_IF_ERROR(RequireDType(args, *meta, names[i]));
    if (meta->rank() != 1 || meta->shape[0] != c) {
      return args.Error(absl::StrCat(names[i], " must have shape [", c, "], got ",
                                     meta->ToString()));
    }
    slots[i] = InputIndex(args, 1 + i, names[i]);
  }
  if (input.shape[0] * Product(input.shape, 2, input.rank()) == 0 && input.NumElements() > 0) {
    return args.Error("batch statistics of an empty batch");
  }
  PreparedOp op;
  op.outputs = {input, TensorMeta{DType::kF32, {c}}, TensorMeta{DType::kF32, {c}}};
  op.kernel = std::make_unique<BatchStatsNormKernel>(
      input.shape[0], c, Product(input.shape, 2, input.rank()), eps, slots[0], slots[1]);
  return op;
}

}  // namespace kiln::runtime
