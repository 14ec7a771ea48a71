// aten._softmax.default and aten._log_softmax.default over any dim of an
// f32 tensor (half_to_float must be false), computed like ATen:
// exp(x - max) / sum and x - max - log(sum), so large inputs do not
// overflow and rows of -inf give NaN. aten._safe_softmax (what attention
// with a mask that may hide every key uses) gives 0 for a row of -inf
// alone, as its decomposition's where over any() and full_like() does;
// kept whole by the client's lowering, it is one pass here instead of
// four over the scores.
//
// The tensor is seen as [outer, size(dim), inner]. With inner == 1 (softmax
// over the last dim, as attention does) each row is three contiguous
// passes; otherwise columns are processed in blocks of up to 64 inner
// elements so the loops stay contiguous along inner. exp is vector_math.h's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

class SoftmaxKernel final : public Kernel {
 public:
  SoftmaxKernel(int64_t outer, int64_t size, int64_t inner, bool log, bool safe)
      : outer_(outer), size_(size), inner_(inner), log_(log), safe_(safe) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const int64_t n = size_, inner = inner_;
    const bool log = log_, safe = safe_;
    if (outer_ == 0 || n == 0 || inner == 0) return absl::OkStatus();
    if (inner == 1) {
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 13) / n);
      ParallelFor(outer_, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const float* x = in + r * n;
          float* y = out + r * n;
          const float m = vmath::Max(x, n);
          // Max passes over NaN: a row of -inf is checked element by
          // element (rarely: its max is -inf).
          if (safe && m == kNegInf && std::all_of(x, x + n, [](float v) { return v == kNegInf; })) {
            std::fill(y, y + n, 0.0f);
            continue;
          }
          const float sum = vmath::ExpShiftedSum(x, m, y, n);
          if (log) {
            const float shift = m + std::log(sum);
            for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
          } else {
            const float inv = 1.0f / sum;
            for (int64_t i = 0; i < n; ++i) y[i] *= inv;
          }
        }
      });
      return absl::OkStatus();
    }
    constexpr int64_t kBlock = 64;
    const int64_t blocks = (inner + kBlock - 1) / kBlock;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 13) / (n * std::min(inner, kBlock)));
    ParallelFor(outer_ * blocks, grain, [&](int64_t b, int64_t e) {
      float m[kBlock], sum[kBlock];
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / blocks;
        const int64_t c0 = (t % blocks) * kBlock;
        const int64_t len = std::min(kBlock, inner - c0);
        const float* x = in + o * n * inner + c0;
        float* y = out + o * n * inner + c0;
        std::fill(m, m + kBlock, -std::numeric_limits<float>::infinity());
        std::fill(sum, sum + kBlock, 0.0f);
        for (int64_t i = 0; i < n; ++i) {
          const float* xr = x + i * inner;
          for (int64_t j = 0; j < len; ++j) m[j] = std::max(m[j], xr[j]);
        }
        // A partial last vector computes lanes past len from m's and sum's
        // spare entries; they are never stored to y.
        for (int64_t i = 0; i < n; ++i) {
          const float* xr = x + i * inner;
          float* yr = y + i * inner;
          int64_t j = 0;
          for (; j + 8 <= len; j += 8) {
            const __m256 e =
                vmath::Exp(_mm256_sub_ps(_mm256_loadu_ps(xr + j), _mm256_loadu_ps(m + j)));
            _mm256_storeu_ps(yr + j, e);
            _mm256_storeu_ps(sum + j, _mm256_add_ps(_mm256_loadu_ps(sum + j), e));
          }
          if (j < len) {
            const __m256i mask = vmath::TailMask(len - j);
            const __m256 e = vmath::Exp(
                _mm256_sub_ps(_mm256_maskload_ps(xr + j, mask), _mm256_loadu_ps(m + j)));
            _mm256_maskstore_ps(yr + j, mask, e);
            _mm256_storeu_ps(sum + j, _mm256_add_ps(_mm256_loadu_ps(sum + j), e));
          }
        }
        if (log) {
          for (int64_t j = 0; j < len; ++j) sum[j] = m[j] + std::log(sum[j]);
          for (int64_t i = 0; i < n; ++i) {
            const float* xr = x + i * inner;
            float* yr = y + i * inner;
            for (int64_t j = 0; j < len; ++j) yr[j] = xr[j] - sum[j];
          }
          continue;
        }
        for (int64_t j = 0; j < len; ++j) sum[j] = 1.0f / sum[j];
        for (int64_t i = 0; i < n; ++i) {
          float* yr = y + i * inner;
          for (int64_t j = 0; j < len; ++j) yr[j] *= sum[j];
        }
        if (!safe) continue;
        for (int64_t j = 0; j < len; ++j) {
          if (m[j] != kNegInf) continue;
          bool all = true;
          for (int64_t i = 0; i < n && all; ++i) all = x[i * inner + j] == kNegInf;
          if (!all) continue;
          for (int64_t i = 0; i < n; ++i) y[i * inner + j] = 0.0f;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t outer_, size_, inner_;
  bool log_, safe_;
};


absl::StatusOr<PreparedOp> PrepareSoftmaxOf(const NodeArgs& args, bool log) {
  // (self, dim, half_to_float)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool half_to_float, args.Bool(2, "half_to_float", false));
  if (half_to_float) {
    return args.Error("half_to_float is only valid for f16 inputs");
  }
  KILN_ASSIGN_OR_RETURN(DimLines lines, LinesAlong(args, self, dim_arg));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<SoftmaxKernel>(lines.outer, lines.n, lines.inner, log,
                                              /*safe=*/false);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareSoftmax(const NodeArgs& args) {
  return PrepareSoftmaxOf(args, /*log=*/false);
}

absl::StatusOr<PreparedOp> PrepareLogSoftmax(const NodeArgs& args) {
  return PrepareSoftmaxOf(args, /*log=*/true);
}

absl::StatusOr<PreparedOp> PrepareSafeSoftmax(const NodeArgs& args) {
  // (self, dim, dtype=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, 2, "dtype", DType::kF32, kAllDTypes));
  if (dtype != DType::kF32) {
    return args.Unimplemented(absl::StrCat("_safe_softmax to ", DTypeName(dtype),
                                           " (f32 only)"));
  }
  KILN_ASSIGN_OR_RETURN(DimLines lines, LinesAlong(args, self, dim_arg));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<SoftmaxKernel>(lines.outer, lines.n, lines.inner, /*log=*/false,
                                              /*safe=*/true);
  return op;
}

}  // namespace kiln::runtime
