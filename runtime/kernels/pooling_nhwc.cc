// 2-D pooling over channels-last tensors (dense [N, H, W, C]), the forms
// passes/channels_last.cc gives aten.max_pool2d_with_indices (values only:
// the pass uses it when nothing reads the indices), aten.avg_pool2d and
// aten._adaptive_avg_pool2d. Same arguments and window arithmetic as the
// NCHW kernels (pooling.cc); the inner loop runs over contiguous channels,
// so it vectorizes. Max pooling takes the pixels whose window lies inside
// the input several 8-channel vectors at a time, which bench/kernels
// BM_MaxPoolNhwc found faster than one vector a step on squeezenet's and
// resnet's pools.
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/pool_geometry.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Output rows (n, oy) per task: at least ~16K output elements.
int64_t RowGrain(const PoolGeometry& g, int64_t channels) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, g.ow * channels));
}

// ATen propagates NaN: a NaN maximum stays, a NaN input wins.
inline float NanMax(float acc, float v) { return (acc > v || acc != acc) ? acc : v; }
inline __m256 NanMax(__m256 acc, __m256 v) {
  const __m256 keep = _mm256_or_ps(_mm256_cmp_ps(acc, v, _CMP_GT_OQ),
                                   _mm256_cmp_ps(acc, acc, _CMP_UNORD_Q));
  return _mm256_blendv_ps(v, acc, keep);
}
inline __m256 NegInf() { return _mm256_set1_ps(-std::numeric_limits<float>::infinity()); }

// One output pixel by ATen's rule, window clipped to the input: the path
// for border pixels, channel counts that are not whole vectors, and rows
// holding a NaN.
void MaxPixelExact(const PoolGeometry& g, int64_t c, const float* x, int64_t y0, int64_t y1,
                   int64_t ox, float* y) {
  int64_t x0 = ox * g.sw - g.pw;
  const int64_t x1 = std::min(x0 + (g.kw - 1) * g.dw + 1, g.iw);
  while (x0 < 0) x0 += g.dw;
  // Four vectors of channels at a time held in registers across the
  // whole window, instead of reading and writing the output once per
  // window element.
  int64_t k0 = 0;
  for (; k0 + 32 <= c; k0 += 32) {
    __m256 a0 = NegInf(), a1 = NegInf(), a2 = NegInf(), a3 = NegInf();
    for (int64_t iy = y0; iy < y1; iy += g.dh) {
      for (int64_t ix = x0; ix < x1; ix += g.dw) {
        const float* v = x + (iy * g.iw + ix) * c + k0;
        a0 = NanMax(a0, _mm256_loadu_ps(v));
        a1 = NanMax(a1, _mm256_loadu_ps(v + 8));
        a2 = NanMax(a2, _mm256_loadu_ps(v + 16));
        a3 = NanMax(a3, _mm256_loadu_ps(v + 24));
      }
    }
    _mm256_storeu_ps(y + k0, a0);
    _mm256_storeu_ps(y + k0 + 8, a1);
    _mm256_storeu_ps(y + k0 + 16, a2);
    _mm256_storeu_ps(y + k0 + 24, a3);
  }
  for (; k0 + 8 <= c; k0 += 8) {
    __m256 a = NegInf();
    for (int64_t iy = y0; iy < y1; iy += g.dh) {
      for (int64_t ix = x0; ix < x1; ix += g.dw) {
        a = NanMax(a, _mm256_loadu_ps(x + (iy * g.iw + ix) * c + k0));
      }
    }
    _mm256_storeu_ps(y + k0, a);
  }
  for (; k0 < c; ++k0) {
    float a = -std::numeric_limits<float>::infinity();
    for (int64_t iy = y0; iy < y1; iy += g.dh) {
      for (int64_t ix = x0; ix < x1; ix += g.dw) {
        a = NanMax(a, x[(iy * g.iw + ix) * c + k0]);
      }
    }
    y[k0] = a;
  }
}

// The pixels [ox_begin, ox_end) of an output row whose windows lie inside
// the input columns, as a run of 8-channel output vectors (c % 8 == 0),
// `lanes` vectors at a time. With 8 channels a pixel (the blocked layout)
// one accumulator per pixel would wait on every max's latency; several
// side by side keep the units busy. Plain max (keeps the earlier of equal
// values, like ATen) plus a NaN flag: returns false when an input was
// NaN, and the caller redoes the row by ATen's rule.
template <int lanes>
bool MaxInteriorVectors(const PoolGeometry& g, int64_t c, const float* const* rows, int num_rows,
                        int64_t t, int64_t t_end, float* y_row) {
  const int64_t cv = c / 8;
  const int64_t step = g.dw * c;
  __m256 nan = _mm256_setzero_ps();
  for (; t + lanes <= t_end; t += lanes) {
    int64_t off[lanes];
    __m256 a[lanes];
    for (int l = 0; l < lanes; ++l) {
      const int64_t pixel = (t + l) / cv, vec = (t + l) % cv;
      off[l] = (pixel * g.sw - g.pw) * c + vec * 8;
      a[l] = NegInf();
    }
    for (int r = 0; r < num_rows; ++r) {
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        for (int l = 0; l < lanes; ++l) {
          const __m256 v = _mm256_loadu_ps(rows[r] + off[l] + kx * step);
          a[l] = _mm256_max_ps(v, a[l]);
          nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
      }
    }
    for (int l = 0; l < lanes; ++l) _mm256_storeu_ps(y_row + (t + l) * 8, a[l]);
  }
  if (t < t_end) {
    if (!MaxInteriorVectors<1>(g, c, rows, num_rows, t, t_end, y_row)) return false;
  }
  return _mm256_movemask_ps(nan) == 0;
}

class MaxPool2dNhwcKernel final : public Kernel {
 public:
  MaxPool2dNhwcKernel(PoolGeometry g, int64_t n, int64_t c) : g_(g), n_(n), c_(c) {
    // Output columns whose whole window is inside the input.
    ox_begin_ = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);
    const int64_t last_start = g.iw - 1 - (g.kw - 1) * g.dw + g.pw;  // largest ox * sw
    ox_end_ = last_start < 0 ? 0 : std::min(g.ow, last_start / g.sw + 1);
    if (ox_end_ < ox_begin_ || c % 8 != 0 || g.kh > kMaxRows) ox_end_ = ox_begin_;
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry g = g_;
    const int64_t c = c_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ParallelFor(n_ * g.oh, RowGrain(g, c), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / g.oh, oy = row % g.oh;
        const float* x = in + b * g.ih * g.iw * c;
        int64_t y0 = oy * g.sh - g.ph;
        const int64_t y1 = std::min(y0 + (g.kh - 1) * g.dh + 1, g.ih);
        while (y0 < 0) y0 += g.dh;
        float* y_row = out + row * g.ow * c;
        bool exact_interior = ox_end_ == ox_begin_;
        if (!exact_interior) {
          const float* rows[kMaxRows];
          int num_rows = 0;
          for (int64_t iy = y0; iy < y1; iy += g.dh) rows[num_rows++] = x + iy * g.iw * c;
          const int64_t t = ox_begin_ * (c / 8), t_end = ox_end_ * (c / 8);
          exact_interior = num_rows == 0 ||
                           !MaxInteriorVectors<4>(g, c, rows, num_rows, t, t_end, y_row);
        }
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          if (ox == ox_begin_ && !exact_interior) ox = ox_end_;
          if (ox >= g.ow) break;
          MaxPixelExact(g, c, x, y0, y1, ox, y_row + ox * c);
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  // Windows taller than this take the exact path throughout.
  static constexpr int kMaxRows = 16;
  PoolGeometry g_;
  int64_t n_, c_;
  int64_t ox_begin_ = 0, ox_end_ = 0;
};

// Average over a window; the divisor per output position is fixed at
// prepare time by the same rule as the NCHW kernel.
class AvgPool2dNhwcKernel final : public Kernel {
 public:
  AvgPool2dNhwcKernel(PoolGeometry g, int64_t n, int64_t c, bool count_include_pad,
                      std::optional<int64_t> divisor_override, bool adaptive)
      : g_(g), n_(n), c_(c), count_include_pad_(count_include_pad),
        divisor_override_(divisor_override), adaptive_(adaptive) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry g = g_;
    const int64_t c = c_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ParallelFor(n_ * g.oh, RowGrain(g, c), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / g.oh, oy = row % g.oh;
        const float* x = in + b * g.ih * g.iw * c;
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          float* y = out + (row * g.ow + ox) * c;
          int64_t y0, y1, x0, x1, divisor;
          if (adaptive_) {
            y0 = AdaptiveStart(oy, g.ih, g.oh);
            y1 = AdaptiveEnd(oy, g.ih, g.oh);
            x0 = AdaptiveStart(ox, g.iw, g.ow);
            x1 = AdaptiveEnd(ox, g.iw, g.ow);
            divisor = (y1 - y0) * (x1 - x0);
          } else {
            y0 = oy * g.sh - g.ph;
            x0 = ox * g.sw - g.pw;
            y1 = std::min(y0 + g.kh, g.ih + g.ph);
            x1 = std::min(x0 + g.kw, g.iw + g.pw);
            const int64_t pool_size = (y1 - y0) * (x1 - x0);
            y0 = std::max<int64_t>(y0, 0);
            x0 = std::max<int64_t>(x0, 0);
            y1 = std::min(y1, g.ih);
            x1 = std::min(x1, g.iw);
            divisor = divisor_override_   ? *divisor_override_
                      : count_include_pad_ ? pool_size
                                           : (y1 - y0) * (x1 - x0);
          }
          std::fill(y, y + c, 0.0f);
          if (y0 >= y1 || x0 >= x1) continue;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float* v = x + (iy * g.iw + ix) * c;
              for (int64_t k = 0; k < c; ++k) y[k] += v[k];
            }
          }
          // Division, not a multiply by the reciprocal, to round as the
          // NCHW kernel does.
          const float d = static_cast<float>(divisor);
          for (int64_t k = 0; k < c; ++k) y[k] /= d;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  PoolGeometry g_;
  int64_t n_, c_;
  bool count_include_pad_;
  std::optional<int64_t> divisor_override_;
  bool adaptive_;
};

// Reads the [N, H, W, C] input into g (ih, iw) and returns it.
absl::StatusOr<TensorMeta> NhwcInput(const NodeArgs& args, PoolGeometry* g) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "self"));
  if (input.rank() != 4) {
    return args.Error(absl::StrCat("expected a 4-D channels-last input, got ", input.ToString()));
  }
  for (int d = 1; d < 4; ++d) {
    if (input.shape[d] == 0) {
      return args.Error(absl::StrCat("input ", input.ToString(),
                                     " must have non-zero channel and spatial sizes"));
    }
  }
  g->ih = input.shape[1];
  g->iw = input.shape[2];
  return input;
}

PreparedOp NhwcOutput(const TensorMeta& input, const PoolGeometry& g) {
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, {input.shape[0], g.oh, g.ow, input.shape[3]}}};
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareMaxPool2dNhwc(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(TensorMeta input, NhwcInput(args, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(5, "ceil_mode", false));
  KILN_RETURN_IF_ERROR(ReadWindow(args, /*has_dilation=*/true, ceil_mode, &g));
  PreparedOp op = NhwcOutput(input, g);
  op.kernel = std::make_unique<MaxPool2dNhwcKernel>(g, input.shape[0], input.shape[3]);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAvgPool2dNhwc(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, ceil_mode=False,
  //  count_include_pad=True, divisor_override=None)
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(TensorMeta input, NhwcInput(args, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(4, "ceil_mode", false));
  KILN_ASSIGN_OR_RETURN(bool count_include_pad, args.Bool(5, "count_include_pad", true));
  std::optional<int64_t> divisor;
  if (args.Find(6, "divisor_override") != nullptr) {
    KILN_ASSIGN_OR_RETURN(divisor, args.Int(6, "divisor_override"));
    if (*divisor == 0) return args.Error("divisor_override must be non-zero");
  }
  KILN_RETURN_IF_ERROR(ReadWindow(args, /*has_dilation=*/false, ceil_mode, &g));
  PreparedOp op = NhwcOutput(input, g);
  op.kernel = std::make_unique<AvgPool2dNhwcKernel>(g, input.shape[0], input.shape[3],
                                                    count_include_pad, divisor, false);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAdaptiveAvgPool2dNhwc(const NodeArgs& args) {
  // (self, output_size[2])
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(TensorMeta input, NhwcInput(args, &g));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size_list, args.IntList(1, "output_size"));
  KILN_ASSIGN_OR_RETURN(auto size, ExpandPair(args, size_list, "output_size"));
  if (size[0] < 0 || size[1] < 0) {
    return args.Error(absl::StrCat("output_size must be non-negative, got ",
                                   ShapeString(size_list)));
  }
  g.oh = size[0];
  g.ow = size[1];
  PreparedOp op = NhwcOutput(input, g);
  op.kernel = std::make_unique<AvgPool2dNhwcKernel>(g, input.shape[0], input.shape[3], true,
                                                    std::nullopt, true);
  return op;
}

}  // namespace kiln::runtime
