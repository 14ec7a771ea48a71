// kiln.interleave_channels(a, b, split_sizes): the channels of two
// channels-last tensors of one shape [..., C] interleaved (a0 b0 a1 b1 ...)
// and cut along the last dimension into pieces of split_sizes (even,
// summing to 2C). That is shufflenet's channel shuffle in two groups of
// cat([a, b]), with the split that follows it, in one pass over the bytes
// instead of three (cat, permute, split); passes/fuse_channel_shuffle.cc
// builds it.
#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// out[2j] = a[j], out[2j + 1] = b[j] for j < n.
void Interleave(const float* a, const float* b, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 va = _mm256_loadu_ps(a + j), vb = _mm256_loadu_ps(b + j);
    const __m256 lo = _mm256_unpacklo_ps(va, vb);  // a0 b0 a1 b1 | a4 b4 a5 b5
    const __m256 hi = _mm256_unpackhi_ps(va, vb);  // a2 b2 a3 b3 | a6 b6 a7 b7
    _mm256_storeu_ps(out + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(out + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
  }
  for (; j < n; ++j) {
    out[2 * j] = a[j];
    out[2 * j + 1] = b[j];
  }
}

class InterleaveChannelsKernel final : public Kernel {
 public:
  InterleaveChannelsKernel(int64_t pixels, int64_t channels, std::vector<int64_t> sizes)
      : pixels_(pixels), channels_(channels), sizes_(std::move(sizes)) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* a = ctx.inputs[0].as<const float>();
    const float* b = ctx.inputs[1].as<const float>();
    const int64_t c = channels_;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(2 * c, 1));
    ParallelFor(pixels_, grain, [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        int64_t half = 0;  // channels of a (and of b) taken so far
        for (size_t i = 0; i < sizes_.size(); ++i) {
          const int64_t s = sizes_[i];
          Interleave(a + p * c + half, b + p * c + half, s / 2,
                     ctx.outputs[i].as<float>() + p * s);
          half += s / 2;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t pixels_, channels_;
  std::vector<int64_t> sizes_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareInterleaveChannels(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta a, args.Tensor(interleave_channels_arg::kA));
  KILN_ASSIGN_OR_RETURN(TensorMeta b, args.Tensor(interleave_channels_arg::kB));
  KILN_RETURN_IF_ERROR(RequireDType(args, a, "a"));
  if (a != b || a.rank() < 1) {
    return args.Error(absl::StrCat("a and b must have one shape of rank >= 1, got ", a.ToString(),
                                   " and ", b.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                        args.IntList(interleave_channels_arg::kSplitSizes));
  const int64_t c = a.shape.back();
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s <= 0 || s % 2 != 0) {
      return args.Error(absl::StrCat("split sizes must be positive and even, got ",
                                     ShapeString(sizes)));
    }
    total += s;
  }
  if (sizes.empty() || total != 2 * c) {
    return args.Error(absl::StrCat("split sizes ", ShapeString(sizes), " must sum to ", 2 * c));
  }
  PreparedOp op;
  for (int64_t s : sizes) {
    TensorMeta out = a;
    out.shape.back() = s;
    op.outputs.push_back(out);
  }
  op.kernel = std::make_unique<InterleaveChannelsKernel>(c == 0 ? 0 : a.NumElements() / c, c,
                                                         std::move(sizes));
  return op;
}

}  // namespace kiln::runtime
