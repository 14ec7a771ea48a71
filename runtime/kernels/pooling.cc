// 2-D pooling over NCHW / CHW f32 tensors: aten.max_pool2d_with_indices,
// aten.avg_pool2d, aten._adaptive_avg_pool2d and aten.adaptive_max_pool2d,
// matching ATen's CPU
// kernels' window arithmetic (ceil_mode, padding, count_include_pad,
// divisor_override, adaptive start/end).
#include <algorithm>
#include <array>
#include <cmath>
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

// Checks the input (CHW or NCHW, f32, non-empty planes) and fills planes,
// ih, iw. Returns the leading dims to which (oh, ow) are appended.
absl::StatusOr<std::vector<int64_t>> CheckPoolInput(const NodeArgs& args,
                                                    const TensorMeta& input,
                                                    PoolGeometry* g) {
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "self"));
  if (input.rank() != 3 && input.rank() != 4) {
    return args.Error(absl::StrCat(
        "expected a 3-D (CHW) or 4-D (NCHW) input, got ", input.ToString()));
  }
  const int r = input.rank();
  for (int d = r - 3; d < r; ++d) {
    if (input.shape[d] == 0) {
      return args.Error(absl::StrCat(
          "input ", input.ToString(),
          " must have non-zero channel and spatial sizes"));
    }
  }
  g->planes = Product(input.shape, 0, r - 2);
  g->ih = input.shape[r - 2];
  g->iw = input.shape[r - 1];
  return std::vector<int64_t>(input.shape.begin(), input.shape.end() - 2);
}

class MaxPool2dKernel final : public Kernel {
 public:
  explicit MaxPool2dKernel(PoolGeometry g) : g_(g) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    ParallelFor(g.planes, PlaneGrain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* x = in + plane * g.ih * g.iw;
        float* y = out + plane * g.oh * g.ow;
        int64_t* yi = indices + plane * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          int64_t y0 = oy * g.sh - g.ph;
          const int64_t y1 = std::min(y0 + (g.kh - 1) * g.dh + 1, g.ih);
          while (y0 < 0) y0 += g.dh;
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            int64_t x0 = ox * g.sw - g.pw;
            const int64_t x1 = std::min(x0 + (g.kw - 1) * g.dw + 1, g.iw);
            while (x0 < 0) x0 += g.dw;
            // Two passes: the max alone compiles to branch-free vmaxss,
            // then a second scan finds its index. (One pass tracking the
            // index branches, and mispredicts on every new maximum.)
            float best_val = -std::numeric_limits<float>::infinity();
            bool any_nan = false;
            for (int64_t iy = y0; iy < y1; iy += g.dh) {
              for (int64_t ix = x0; ix < x1; ix += g.dw) {
                const float v = x[iy * g.iw + ix];
                best_val = best_val < v ? v : best_val;
                any_nan |= v != v;
              }
            }
            // ATen's rule `v > max || isnan(v)` keeps the first maximum
            // in row-major window order, or the last NaN. Scanning the
            // window backwards with a select finds the first maximum
            // without an unpredictable early exit.
            int64_t best = y0 * g.iw + x0;
            if (any_nan) {
              for (int64_t iy = y0; iy < y1; iy += g.dh) {
                for (int64_t ix = x0; ix < x1; ix += g.dw) {
                  if (x[iy * g.iw + ix] != x[iy * g.iw + ix]) {
                    best = iy * g.iw + ix;
                  }
                }
              }
            } else if (y0 < y1 && x0 < x1) {
              const int64_t y_last = y0 + (y1 - 1 - y0) / g.dh * g.dh;
              const int64_t x_last = x0 + (x1 - 1 - x0) / g.dw * g.dw;
              for (int64_t iy = y_last; iy >= y0; iy -= g.dh) {
                for (int64_t ix = x_last; ix >= x0; ix -= g.dw) {
                  const int64_t idx = iy * g.iw + ix;
                  // Select by mask: gcc turns a float-compare ternary
                  // into a branch, which mispredicts on random data.
                  const int64_t mask =
                      -static_cast<int64_t>(x[idx] == best_val);
                  best = (idx & mask) | (best & ~mask);
                }
              }
            }
            y[oy * g.ow + ox] =
                any_nan ? std::numeric_limits<float>::quiet_NaN() : best_val;
            yi[oy * g.ow + ox] = best;
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  PoolGeometry g_;
};

class AvgPool2dKernel final : public Kernel {
 public:
  AvgPool2dKernel(PoolGeometry g, bool count_include_pad,
                  std::optional<int64_t> divisor_override)
      : g_(g),
        count_include_pad_(count_include_pad),
        divisor_override_(divisor_override) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    // Outputs whose window lies inside the row horizontally are summed a
    // whole output row at a time: for each window row and column, one pass
    // adds that tap to every output (a vectorizable loop over ox), so each
    // sum still adds its terms in ATen's order (window row, then column)
    // and the result is the per-output loop's, bit for bit. The few
    // outputs at the row's ends, whose windows are clipped, go one by one.
    const int64_t ox_lo = std::min(g.ow, (g.pw + g.sw - 1) / g.sw);  // first with wx0 >= 0
    int64_t ox_hi = g.iw + g.pw >= g.kw ? (g.iw + g.pw - g.kw) / g.sw + 1 : 0;  // wx0 + kw <= iw
    ox_hi = std::max(ox_lo, std::min(ox_hi, g.ow));
    ParallelFor(g.planes, PlaneGrain(g), [&](int64_t begin, int64_t end) {
      std::vector<float> acc(static_cast<size_t>(g.ow));
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* x = in + plane * g.ih * g.iw;
        float* y = out + plane * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t wy0 = oy * g.sh - g.ph;
          const int64_t wy1 = std::min(wy0 + g.kh, g.ih + g.ph);  // padded window
          const int64_t y0 = std::max<int64_t>(wy0, 0), y1 = std::min(wy1, g.ih);
          float* yr = y + oy * g.ow;
          auto divide = [&](int64_t ox, float sum, int64_t x0, int64_t x1) {
            const int64_t wx0 = ox * g.sw - g.pw;
            const int64_t wx1 = std::min(wx0 + g.kw, g.iw + g.pw);
            const int64_t divisor = divisor_override_ ? *divisor_override_
                                    : count_include_pad_ ? (wy1 - wy0) * (wx1 - wx0)
                                                         : (y1 - y0) * (x1 - x0);
            yr[ox] = sum / static_cast<float>(divisor);
          };
          auto one = [&](int64_t ox) {
            const int64_t wx0 = ox * g.sw - g.pw;
            const int64_t x0 = std::max<int64_t>(wx0, 0);
            const int64_t x1 = std::min(std::min(wx0 + g.kw, g.iw + g.pw), g.iw);
            if (y0 >= y1 || x0 >= x1) {
              yr[ox] = 0.0f;
              return;
            }
            float sum = 0.0f;
            for (int64_t iy = y0; iy < y1; ++iy) {
              for (int64_t ix = x0; ix < x1; ++ix) sum += x[iy * g.iw + ix];
            }
            divide(ox, sum, x0, x1);
          };
          for (int64_t ox = 0; ox < ox_lo; ++ox) one(ox);
          for (int64_t ox = ox_hi; ox < g.ow; ++ox) one(ox);
          if (ox_lo >= ox_hi) continue;
          if (y0 >= y1) {
            std::fill(yr + ox_lo, yr + ox_hi, 0.0f);
            continue;
          }
          float* a = acc.data();
          std::fill(a + ox_lo, a + ox_hi, 0.0f);
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              // Input column of output ox's tap kx: ox * sw - pw + kx.
              const float* xr = x + iy * g.iw + kx - g.pw;
              if (g.sw == 1) {
                for (int64_t ox = ox_lo; ox < ox_hi; ++ox) a[ox] += xr[ox];
              } else {
                for (int64_t ox = ox_lo; ox < ox_hi; ++ox) a[ox] += xr[ox * g.sw];
              }
            }
          }
          for (int64_t ox = ox_lo; ox < ox_hi; ++ox) {
            const int64_t wx0 = ox * g.sw - g.pw;
            divide(ox, a[ox], wx0, wx0 + g.kw);
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  PoolGeometry g_;
  bool count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

class AdaptiveAvgPool2dKernel final : public Kernel {
 public:
  explicit AdaptiveAvgPool2dKernel(PoolGeometry g) : g_(g) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ParallelFor(g.planes, PlaneGrain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* x = in + plane * g.ih * g.iw;
        float* y = out + plane * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t y0 = AdaptiveStart(oy, g.ih, g.oh), y1 = AdaptiveEnd(oy, g.ih, g.oh);
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t x0 = AdaptiveStart(ox, g.iw, g.ow), x1 = AdaptiveEnd(ox, g.iw, g.ow);
            float sum = 0.0f;
            for (int64_t iy = y0; iy < y1; ++iy) {
              for (int64_t ix = x0; ix < x1; ++ix) sum += x[iy * g.iw + ix];
            }
            y[oy * g.ow + ox] =
                sum / static_cast<float>((y1 - y0) * (x1 - x0));
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  PoolGeometry g_;
};

// The maximum of each adaptive window and its flat index in the plane; a
// NaN wins (the last NaN of the window, as ATen's scan keeps it).
class AdaptiveMaxPool2dKernel final : public Kernel {
 public:
  explicit AdaptiveMaxPool2dKernel(PoolGeometry g) : g_(g) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const PoolGeometry& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    ParallelFor(g.planes, PlaneGrain(g), [&](int64_t begin, int64_t end) {
      for (int64_t plane = begin; plane < end; ++plane) {
        const float* x = in + plane * g.ih * g.iw;
        float* y = out + plane * g.oh * g.ow;
        int64_t* yi = indices + plane * g.oh * g.ow;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t y0 = AdaptiveStart(oy, g.ih, g.oh), y1 = AdaptiveEnd(oy, g.ih, g.oh);
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            const int64_t x0 = AdaptiveStart(ox, g.iw, g.ow), x1 = AdaptiveEnd(ox, g.iw, g.ow);
            float best = -std::numeric_limits<float>::infinity();
            int64_t at = y0 * g.iw + x0;
            for (int64_t iy = y0; iy < y1; ++iy) {
              for (int64_t ix = x0; ix < x1; ++ix) {
                const float v = x[iy * g.iw + ix];
                if (v > best || std::isnan(v)) {
                  best = v;
                  at = iy * g.iw + ix;
                }
              }
            }
            y[oy * g.ow + ox] = best;
            yi[oy * g.ow + ox] = at;
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  PoolGeometry g_;
};

// output_size (one or two non-negative values) appended to `lead`.
absl::Status ReadAdaptiveSize(const NodeArgs& args, PoolGeometry* g, std::vector<int64_t>* lead) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size_list, args.IntList(1, "output_size"));
  KILN_ASSIGN_OR_RETURN(auto size, ExpandPair(args, size_list, "output_size"));
  if (size[0] < 0 || size[1] < 0) {
    return args.Error(absl::StrCat("output_size must be non-negative, got ",
                                   ShapeString(size_list)));
  }
  g->oh = size[0];
  g->ow = size[1];
  lead->push_back(g->oh);
  lead->push_back(g->ow);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareMaxPool2dWithIndices(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead,
                        CheckPoolInput(args, input, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(5, "ceil_mode", false));
  KILN_RETURN_IF_ERROR(ReadWindow(args, /*has_dilation=*/true, ceil_mode, &g));
  lead.push_back(g.oh);
  lead.push_back(g.ow);
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, lead}, TensorMeta{DType::kI64, lead}};
  op.kernel = std::make_unique<MaxPool2dKernel>(g);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAvgPool2d(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, ceil_mode=False,
  //  count_include_pad=True, divisor_override=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead,
                        CheckPoolInput(args, input, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(4, "ceil_mode", false));
  KILN_ASSIGN_OR_RETURN(bool count_include_pad,
                        args.Bool(5, "count_include_pad", true));
  std::optional<int64_t> divisor;
  if (args.Find(6, "divisor_override") != nullptr) {
    KILN_ASSIGN_OR_RETURN(divisor, args.Int(6, "divisor_override"));
    if (*divisor == 0) return args.Error("divisor_override must be non-zero");
  }
  KILN_RETURN_IF_ERROR(
      ReadWindow(args, /*has_dilation=*/false, ceil_mode, &g));
  lead.push_back(g.oh);
  lead.push_back(g.ow);
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, lead}};
  op.kernel = std::make_unique<AvgPool2dKernel>(g, count_include_pad, divisor);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAdaptiveAvgPool2d(const NodeArgs& args) {
  // (self, output_size[2])
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, CheckPoolInput(args, input, &g));
  KILN_RETURN_IF_ERROR(ReadAdaptiveSize(args, &g, &lead));
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, lead}};
  op.kernel = std::make_unique<AdaptiveAvgPool2dKernel>(g);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAdaptiveMaxPool2d(const NodeArgs& args) {
  // (self, output_size[2]) -> (out, indices)
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  PoolGeometry g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, CheckPoolInput(args, input, &g));
  KILN_RETURN_IF_ERROR(ReadAdaptiveSize(args, &g, &lead));
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, lead}, TensorMeta{DType::kI64, lead}};
  op.kernel = std::make_unique<AdaptiveMaxPool2dKernel>(g);
  return op;
}

}  // namespace kiln::runtime
