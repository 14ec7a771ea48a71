// Narrow-group convolution (see conv_narrow_group.h).
//
// Output channels go in blocks of 8 (two groups of 4, or one of 8);
// because a group has as many input as output channels, block b of the
// output reads exactly block b of the input's channels. For one output
// pixel and one tap, input channel i of each group is spread over the
// group's lanes (groups of 4: the 8 channels loaded, then an in-lane
// shuffle; groups of 8: a broadcast load) and multiplied by the weights
// w[o][i] of the 8 output channels o. The shuffle and the multiply-add
// run on different ports, and there is nothing to reduce across lanes
// afterwards.
//
// A task computes whole output rows: strips of 8 pixels per channel block
// (8 accumulators), the pixels whose taps all fall inside the input
// without bounds checks, the border pixels one at a time with them. The
// row is then finished (bias first, post-ops after) in one pass; with a
// residual it is computed into a row of its own and stored last, so the
// output may share the residual's bytes.
#include "runtime/kernels/conv_narrow_group.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "runtime/compile/constant_persistence.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/worker_scratch.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kBlock = 8;  // output channels in a vector: one or two groups
constexpr int kStrip = 8;      // output pixels computed together

bool Enabled() {
  static const bool on = KernelSwitchOn("KILN_NARROW_GROUPS");
  return on;
}

// Input channel I of each group in the 8 channels at px, over its group's
// lanes.
template <int I>
inline __m256 GroupChannel(const float* px) {
  return _mm256_permute_ps(_mm256_loadu_ps(px), I * 0x55);
}

// acc[j] += one tap for X output pixels: px is the first one's input pixel
// (at the block's channels), `step` the floats between consecutive ones'
// input pixels, wk the tap's [G][8] weights. With groups of 8 the vector
// is one group, and its input channel i is a broadcast load.
template <int G, int X>
inline void Tap(const float* px, int64_t step, const float* wk, __m256* acc) {
  if constexpr (G == 8) {
    for (int i = 0; i < G; ++i) {
      const __m256 w = _mm256_loadu_ps(wk + i * kBlock);
      for (int j = 0; j < X; ++j) {
        acc[j] = _mm256_fmadd_ps(_mm256_broadcast_ss(px + j * step + i), w, acc[j]);
      }
    }
    return;
  }
  static_assert(G == 4 || G == 8, "group widths");
  const __m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8),
               w2 = _mm256_loadu_ps(wk + 16), w3 = _mm256_loadu_ps(wk + 24);
  for (int j = 0; j < X; ++j) {
    const float* p = px + j * step;
    acc[j] = _mm256_fmadd_ps(GroupChannel<0>(p), w0, acc[j]);
    acc[j] = _mm256_fmadd_ps(GroupChannel<1>(p), w1, acc[j]);
    acc[j] = _mm256_fmadd_ps(GroupChannel<2>(p), w2, acc[j]);
    acc[j] = _mm256_fmadd_ps(GroupChannel<3>(p), w3, acc[j]);
  }
}

class NarrowGroupConvKernel final : public Kernel {
 public:
  struct Config {
    NarrowGroupConvShape s;
    int input_index = -1, bias_index = -1, residual_index = -1;
    std::vector<float> weights;  // [OC/8][KH][KW][C/groups][8]
    std::vector<float> bias;     // a constant bias, copied
    std::vector<PostOpRun> post_ops;
    // Output columns [x_lo, x_hi) read no padding.
    int64_t x_lo = 0, x_hi = 0;
  };

  // With a residual, each worker computes a row apart and adds the
  // residual row to it (the output may be the residual's buffer).
  explicit NarrowGroupConvKernel(Config c)
      : c_(std::move(c)),
        own_row_(0, c_.residual_index >= 0
                        ? static_cast<size_t>(c_.s.ow * c_.s.oc) * sizeof(float) : 0) {}

  size_t ScratchBytes() const override { return own_row_.End(); }

  absl::Status Run(const KernelContext& ctx) const override {
    const NarrowGroupConvShape& s = c_.s;
    const float* in = ctx.inputs[c_.input_index].as<const float>();
    const float* bias = !c_.bias.empty() ? c_.bias.data() : ctx.OptionalF32(c_.bias_index);
    const float* residual = ctx.OptionalF32(c_.residual_index);
    float* out = ctx.outputs[0].as<float>();
    const int64_t row_floats = s.ow * s.oc;
    const auto compute_row = s.c / s.groups == 8 ? &NarrowGroupConvKernel::ComputeRow<8>
                                                 : &NarrowGroupConvKernel::ComputeRow<4>;
    if (absl::Status arena = own_row_.CheckArena(); !arena.ok()) return arena;
    ParallelFor(s.n * s.oh, 1, [&](int64_t begin, int64_t end) {
      float* own_row = residual != nullptr ? own_row_.Mine<float>(ctx.scratch) : nullptr;
      for (int64_t r = begin; r < end; ++r) {
        float* dst = out + r * row_floats;
        float* row = residual != nullptr ? own_row : dst;
        const float* image = in + r / s.oh * s.h * s.w * s.c;
        (this->*compute_row)(image, r % s.oh, bias, row);
        ApplyPostOpRuns(c_.post_ops, row,
                        residual != nullptr ? residual + r * row_floats : nullptr, row_floats);
        if (row != dst) std::memcpy(dst, row, row_floats * sizeof(float));
      }
    });
    return absl::OkStatus();
  }

 private:
  template <int G>
  void ComputeRow(const float* image, int64_t oy, const float* bias, float* row) const {
    const NarrowGroupConvShape& s = c_.s;
    const int64_t blocks = s.oc / kBlock;
    // Pixels outer, channel blocks inner: the blocks of a strip read the
    // same input pixels' neighbouring bytes, whole lines in order; blocks
    // outer read each line once per block, 512 bytes apart.
    auto strips = [&](auto x_const, auto checked_const, int64_t ox) {
      constexpr int X = decltype(x_const)::value;
      constexpr bool kChecked = decltype(checked_const)::value;
      for (int64_t cb = 0; cb < blocks; ++cb) {
        const __m256 b =
            bias != nullptr ? _mm256_loadu_ps(bias + cb * kBlock) : _mm256_setzero_ps();
        Strip<G, X, kChecked>(image, oy, ox, cb, b, row);
      }
    };
    using One = std::integral_constant<int, 1>;
    using Yes = std::true_type;
    using No = std::false_type;
    int64_t ox = 0;
    for (; ox < c_.x_lo; ++ox) strips(One{}, Yes{}, ox);
    for (; ox + kStrip <= c_.x_hi; ox += kStrip) {
      strips(std::integral_constant<int, kStrip>{}, No{}, ox);
    }
    for (; ox + 4 <= c_.x_hi; ox += 4) strips(std::integral_constant<int, 4>{}, No{}, ox);
    for (; ox < c_.x_hi; ++ox) strips(One{}, No{}, ox);
    for (; ox < s.ow; ++ox) strips(One{}, Yes{}, ox);
  }

  // Output pixels [ox0, ox0 + X) of channel block cb into the row. With
  // kChecked (X == 1) taps outside the input are skipped.
  template <int G, int X, bool kChecked>
  void Strip(const float* image, int64_t oy, int64_t ox0, int64_t cb, __m256 b,
             float* row) const {
    static_assert(X == 1 || !kChecked, "only single pixels check their taps");
    const NarrowGroupConvShape& s = c_.s;
    __m256 acc[X];
    for (int j = 0; j < X; ++j) acc[j] = b;
    const int64_t step = s.stride[1] * s.c;
    const float* wb = c_.weights.data() + cb * s.kh * s.kw * G * kBlock;
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      const int64_t iy = oy * s.stride[0] - s.padding[0] + ky * s.dilation[0];
      if (iy < 0 || iy >= s.h) continue;
      const float* irow = image + iy * s.w * s.c + cb * kBlock;
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const int64_t ix = ox0 * s.stride[1] - s.padding[1] + kx * s.dilation[1];
        if (kChecked && (ix < 0 || ix >= s.w)) continue;
        Tap<G, X>(irow + ix * s.c, step, wb + (ky * s.kw + kx) * G * kBlock, acc);
      }
    }
    for (int j = 0; j < X; ++j) _mm256_storeu_ps(row + (ox0 + j) * s.oc + cb * kBlock, acc[j]);
  }

  Config c_;
  WorkerScratch own_row_;
};

}  // namespace

bool NarrowGroupApplies(const NarrowGroupConvShape& s, bool constant_weight, bool f32_compute,
                        const std::vector<PostOp>& post_ops) {
  if (!Enabled() || !constant_weight || !f32_compute) return false;
  if (s.groups <= 1 || s.c != s.oc || s.c % s.groups != 0) return false;
  const int64_t width = s.c / s.groups;
  if (std::find(kNarrowGroupWidths.begin(), kNarrowGroupWidths.end(), width) ==
      kNarrowGroupWidths.end()) {
    return false;
  }
  if (s.oc % kBlock != 0 || s.n <= 0 || s.oh <= 0 || s.ow <= 0) return false;
  if (s.layout_in != ActivationLayout::kNhwc || s.layout_out != ActivationLayout::kNhwc) {
    return false;
  }
  for (const PostOp& op : post_ops) {
    if (op.kind != PostOp::Kind::kAdd && !LoopsImplement({op})) return false;
  }
  return true;
}

std::unique_ptr<Kernel> MakeNarrowGroupConv(const NarrowGroupConvShape& s, const float* weight,
                                            const float* bias, int input_index, int bias_index,
                                            int residual_index, std::vector<PostOp> post_ops) {
  // Both are read here: bytes from the cache directory are read in and
  // checked first.
  CheckBeforePrepareReads(weight);
  CheckBeforePrepareReads(bias);
  NarrowGroupConvKernel::Config cfg;
  cfg.s = s;
  cfg.input_index = input_index;
  cfg.bias_index = bias_index;
  cfg.residual_index = residual_index;
  cfg.post_ops = SplitPostOpRuns(std::move(post_ops));
  const int64_t g = s.c / s.groups;
  cfg.weights.resize(static_cast<size_t>(s.oc * s.kh * s.kw * g));
  for (int64_t o = 0; o < s.oc; ++o) {
    const int64_t cb = o / kBlock, lane = o % kBlock;
    for (int64_t i = 0; i < g; ++i) {
      for (int64_t ky = 0; ky < s.kh; ++ky) {
        for (int64_t kx = 0; kx < s.kw; ++kx) {
          cfg.weights[(((cb * s.kh + ky) * s.kw + kx) * g + i) * kBlock + lane] =
              weight[((o * g + i) * s.kh + ky) * s.kw + kx];
        }
      }
    }
  }
  if (bias != nullptr) cfg.bias.assign(bias, bias + s.oc);
  // Column ox reads input columns ox * stride - pad + kx * dilation.
  const int64_t sw = s.stride[1], pw = s.padding[1];
  const int64_t last_tap = (s.kw - 1) * s.dilation[1];
  cfg.x_lo = std::min(s.ow, (pw + sw - 1) / sw);
  const int64_t reach = s.w - 1 + pw - last_tap;  // the last column's ox * stride
  cfg.x_hi = reach < 0 ? 0 : std::min(s.ow, reach / sw + 1);
  cfg.x_hi = std::max(cfg.x_lo, cfg.x_hi);
  return std::make_unique<NarrowGroupConvKernel>(std::move(cfg));
}

}  // namespace kiln::runtime
