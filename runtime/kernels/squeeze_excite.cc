// kiln.squeeze_excite(x, w1, b1?, w2, b2?, post_ops1, post_ops2, layout):
// a squeeze-and-excitation block (regnet, efficientnet, mobilenet_v3) in
// one step:
//
//   s = mean of x over H and W             [N, C]
//   h = post_ops1(w1 . s + b1)             [N, R]   w1: [R, C, 1, 1]
//   g = post_ops2(w2 . h + b2)             [N, C]   w2: [C, R, 1, 1]
//   out = x * g, broadcast over H and W
//
// x and out are in `layout` (activation_layout.h: plain NCHW, NHWC or the
// blocked [N, C/8, H, W, 8]). Unfused, the block is four steps: a mean,
// two 1x1 convolutions on a 1x1 image (a few thousand multiply-adds each,
// which cost a oneDNN primitive call apiece) and the multiply;
// passes/fuse_squeeze_excite.cc builds this node from them.
#include <immintrin.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

struct SqueezeExciteParams {
  ActivationLayout layout = ActivationLayout::kPlain;
  int64_t n = 0, c = 0, hw = 0, r = 0;
  int b1 = -1, w2 = -1, b2 = -1;  // indices in KernelContext::inputs
  std::vector<PostOp> post_ops1, post_ops2;
};

// Items per parallel chunk when each item touches `floats` floats: about
// 16K floats a chunk.
int64_t Grain(int64_t floats) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(floats, 1));
}

// out[j] = post_ops(dot(w[j, :], v) + bias[j]) for j < rows. Shared out
// by rows: the larger weights (mobilenet_v3's 960 x 240) come from memory,
// and two cores draw more bandwidth than one.
void MatVec(const float* w, const float* bias, const float* v, int64_t rows, int64_t cols,
            const std::vector<PostOp>& post_ops, float* out) {
  const int64_t grain = 2 * Grain(cols);
  ParallelFor(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      out[j] = vmath::Dot(w + j * cols, v, cols) + (bias ? bias[j] : 0.f);
    }
    if (!post_ops.empty()) ApplyPostOps(post_ops, out + begin, end - begin);
  });
}

class SqueezeExciteKernel final : public Kernel {
 public:
  explicit SqueezeExciteKernel(SqueezeExciteParams p) : p_(std::move(p)) {}

  // Per image: the channel means, the hidden vector, the gate.
  size_t ScratchBytes() const override {
    return static_cast<size_t>(p_.n * (2 * p_.c + p_.r)) * sizeof(float);
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    auto in = [&](int index) { return index < 0 ? nullptr : ctx.inputs[index].as<const float>(); };
    const float* w1 = ctx.inputs[1].as<const float>();
    const float* w2 = in(p_.w2);
    const int64_t n = p_.n, c = p_.c, r = p_.r;
    float* means = static_cast<float*>(ctx.scratch);
    float* gates = means + n * c;
    float* hidden = gates + n * c;

    Means(x, means);
    for (int64_t i = 0; i < n; ++i) {
      MatVec(w1, in(p_.b1), means + i * c, r, c, p_.post_ops1, hidden + i * r);
      MatVec(w2, in(p_.b2), hidden + i * r, c, r, p_.post_ops2, gates + i * c);
    }
    Scale(x, gates, out);
    return absl::OkStatus();
  }

 private:
  // means[i * c + k] = mean of channel k of image i.
  void Means(const float* x, float* means) const {
    const int64_t n = p_.n, c = p_.c, hw = p_.hw;
    const float inv = 1.0f / static_cast<float>(hw);
    switch (p_.layout) {
      case ActivationLayout::kPlain: {
        // One contiguous plane per (image, channel).
        const int64_t grain = Grain(hw);
        ParallelFor(n * c, grain, [&](int64_t begin, int64_t end) {
          for (int64_t plane = begin; plane < end; ++plane) {
            const float* src = x + plane * hw;
            __m256 acc = _mm256_setzero_ps();
            int64_t i = 0;
            for (; i + 8 <= hw; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(src + i));
            float sum = vmath::HorizontalSum(acc);
            for (; i < hw; ++i) sum += src[i];
            means[plane] = sum * inv;
          }
        });
        return;
      }
      case ActivationLayout::kBlocked: {
        // One contiguous [H*W, 8] block per (image, channel block).
        const int64_t blocks = c / kChannelBlock;
        const int64_t grain = Grain(hw * kChannelBlock);
        ParallelFor(n * blocks, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            const float* src = x + b * hw * kChannelBlock;
            __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
            int64_t p = 0;
            for (; p + 2 <= hw; p += 2) {
              acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(src + p * kChannelBlock));
              acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(src + (p + 1) * kChannelBlock));
            }
            if (p < hw) acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(src + p * kChannelBlock));
            _mm256_storeu_ps(means + b * kChannelBlock,
                             _mm256_mul_ps(_mm256_add_ps(acc0, acc1), _mm256_set1_ps(inv)));
          }
        });
        return;
      }
      case ActivationLayout::kNhwc: {
        // Channels are contiguous per pixel: each task sums a range of
        // channels over every pixel of one image.
        constexpr int64_t kChunk = 64;
        const int64_t chunks = (c + kChunk - 1) / kChunk;
        const int64_t grain = Grain(hw * kChunk);
        ParallelFor(n * chunks, grain, [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t) {
            const int64_t i = t / chunks, k0 = (t % chunks) * kChunk;
            const int64_t k1 = std::min(c, k0 + kChunk);
            float acc[kChunk] = {};
            const float* src = x + i * hw * c;
            for (int64_t p = 0; p < hw; ++p) {
              const float* px = src + p * c;
              for (int64_t k = k0; k < k1; ++k) acc[k - k0] += px[k];
            }
            for (int64_t k = k0; k < k1; ++k) means[i * c + k] = acc[k - k0] * inv;
          }
        });
        return;
      }
    }
  }

  // out = x * gate of its channel.
  void Scale(const float* x, const float* gates, float* out) const {
    const int64_t n = p_.n, c = p_.c, hw = p_.hw;
    switch (p_.layout) {
      case ActivationLayout::kPlain: {
        const int64_t grain = Grain(hw);
        ParallelFor(n * c, grain, [&](int64_t begin, int64_t end) {
          for (int64_t plane = begin; plane < end; ++plane) {
            const float g = gates[plane];
            const float* src = x + plane * hw;
            float* dst = out + plane * hw;
            for (int64_t i = 0; i < hw; ++i) dst[i] = src[i] * g;
          }
        });
        return;
      }
      case ActivationLayout::kBlocked: {
        const int64_t blocks = c / kChannelBlock;
        const int64_t grain = Grain(hw * kChannelBlock);
        ParallelFor(n * blocks, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            const __m256 g = _mm256_loadu_ps(gates + b * kChannelBlock);
            const float* src = x + b * hw * kChannelBlock;
            float* dst = out + b * hw * kChannelBlock;
            for (int64_t p = 0; p < hw; ++p) {
              _mm256_storeu_ps(dst + p * kChannelBlock,
                               _mm256_mul_ps(_mm256_loadu_ps(src + p * kChannelBlock), g));
            }
          }
        });
        return;
      }
      case ActivationLayout::kNhwc: {
        const int64_t grain = Grain(c);
        ParallelFor(n * hw, grain, [&](int64_t begin, int64_t end) {
          for (int64_t row = begin; row < end; ++row) {
            const float* g = gates + (row / hw) * c;
            const float* src = x + row * c;
            float* dst = out + row * c;
            for (int64_t k = 0; k < c; ++k) dst[k] = src[k] * g[k];
          }
        });
        return;
      }
    }
  }

  SqueezeExciteParams p_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareSqueezeExcite(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta x, args.Tensor(squeeze_excite_arg::kX));
  KILN_RETURN_IF_ERROR(RequireDType(args, x, "x"));
  KILN_ASSIGN_OR_RETURN(int64_t layout_arg, args.Int(squeeze_excite_arg::kLayout));
  if (layout_arg < 0 || layout_arg > 2) {
    return args.Error(absl::StrCat("layout must be 0 (plain), 1 (nhwc) or 2 (blocked), got ",
                                   layout_arg));
  }
  SqueezeExciteParams p;
  p.layout = static_cast<ActivationLayout>(layout_arg);
  const std::vector<int64_t> nchw = LogicalShape(x.shape, p.layout);
  if (nchw.empty()) {
    return args.Error(absl::StrCat("x ", x.ToString(), " is not an image in layout ", layout_arg));
  }
  p.n = nchw[0];
  p.c = nchw[1];
  p.hw = nchw[2] * nchw[3];
  if (p.hw == 0) return args.Error("x has no pixels to average");
  KILN_ASSIGN_OR_RETURN(TensorMeta w1, args.Tensor(squeeze_excite_arg::kW1));
  KILN_ASSIGN_OR_RETURN(TensorMeta w2, args.Tensor(squeeze_excite_arg::kW2));
  KILN_RETURN_IF_ERROR(RequireDType(args, w1, "w1"));
  KILN_RETURN_IF_ERROR(RequireDType(args, w2, "w2"));
  if (w1.rank() != 4 || w1.shape[1] != p.c || w1.shape[2] != 1 || w1.shape[3] != 1) {
    return args.Error(absl::StrCat("w1 must be [R, ", p.c, ", 1, 1], got ", w1.ToString()));
  }
  p.r = w1.shape[0];
  if (w2.shape != std::vector<int64_t>{p.c, p.r, 1, 1}) {
    return args.Error(absl::StrCat("w2 must be [", p.c, ", ", p.r, ", 1, 1], got ",
                                   w2.ToString()));
  }
  const int64_t bias_len[] = {p.r, p.c};
  int* bias_index[] = {&p.b1, &p.b2};
  const ArgSlot bias_arg[] = {squeeze_excite_arg::kB1, squeeze_excite_arg::kB2};
  for (int k = 0; k < 2; ++k) {
    const char* name = bias_arg[k].name;
    KILN_ASSIGN_OR_RETURN(std::optional<TensorMeta> b, args.OptionalTensor(bias_arg[k]));
    if (!b) continue;
    KILN_RETURN_IF_ERROR(RequireDType(args, *b, name));
    if (b->shape != std::vector<int64_t>{bias_len[k]}) {
      return args.Error(absl::StrCat(name, " must be [", bias_len[k], "], got ", b->ToString()));
    }
    *bias_index[k] = InputIndex(args, bias_arg[k]);
  }
  p.w2 = InputIndex(args, squeeze_excite_arg::kW2);
  KILN_ASSIGN_OR_RETURN(p.post_ops1, ParsePostOps(args, squeeze_excite_arg::kPostOps1));
  KILN_ASSIGN_OR_RETURN(p.post_ops2, ParsePostOps(args, squeeze_excite_arg::kPostOps2));
  if (!LoopsImplement(p.post_ops1) || !LoopsImplement(p.post_ops2)) {
    return args.Unimplemented("squeeze-excite post-ops must be activations");
  }
  PreparedOp op;
  op.outputs = {x};
  op.kernel = std::make_unique<SqueezeExciteKernel>(std::move(p));
  return op;
}

}  // namespace kiln::runtime
