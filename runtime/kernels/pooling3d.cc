// 3-D pooling over NCDHW / CDHW f32 tensors: aten.max_pool3d_with_indices,
// aten.avg_pool3d, aten._adaptive_avg_pool3d and aten.adaptive_max_pool3d,
// with ATen's CPU window arithmetic (pool_geometry.h's output size rule,
// ceil_mode, padding, dilation, count_include_pad, divisor_override,
// adaptive start/end). Windows are scanned depth, row, column: a maximum
// keeps the first largest value, or the last NaN; sums add in that order
// in f32, as ATen's kernels do. Indices are flat within each D*H*W plane.
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

using Dims3 = std::array<int64_t, 3>;

struct Pool3d {
  int64_t planes = 0;  // N * C
  Dims3 in{}, out{};
  Dims3 k{1, 1, 1}, s{1, 1, 1}, p{0, 0, 0}, d{1, 1, 1};
  int64_t InPlane() const { return in[0] * in[1] * in[2]; }
  int64_t OutPlane() const { return out[0] * out[1] * out[2]; }
};

// Planes per task: at least ~16K output elements.
int64_t Grain(const Pool3d& g) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, g.OutPlane()));
}

// Calls fn(plane, o, flat output index) for every output position of
// every plane, planes split across threads.
template <typename Fn>
void ForEachOutput(const Pool3d& g, Fn&& fn) {
  ParallelFor(g.planes, Grain(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      int64_t at = plane * g.OutPlane();
      for (int64_t oz = 0; oz < g.out[0]; ++oz) {
        for (int64_t oy = 0; oy < g.out[1]; ++oy) {
          for (int64_t ox = 0; ox < g.out[2]; ++ox) fn(plane, Dims3{oz, oy, ox}, at++);
        }
      }
    }
  });
}

// The maximum over a window given per dim as [lo, hi) with step, ATen's
// rule `v > max || isnan(v)`; *at gets its flat index in the plane.
float WindowMax(const float* x, const Pool3d& g, const Dims3& lo, const Dims3& hi,
                const Dims3& step, int64_t* at) {
  float best = -std::numeric_limits<float>::infinity();
  *at = (lo[0] * g.in[1] + lo[1]) * g.in[2] + lo[2];
  for (int64_t z = lo[0]; z < hi[0]; z += step[0]) {
    for (int64_t y = lo[1]; y < hi[1]; y += step[1]) {
      for (int64_t w = lo[2]; w < hi[2]; w += step[2]) {
        const int64_t idx = (z * g.in[1] + y) * g.in[2] + w;
        const float v = x[idx];
        if (v > best || std::isnan(v)) {
          best = v;
          *at = idx;
        }
      }
    }
  }
  return best;
}

float WindowSum(const float* x, const Pool3d& g, const Dims3& lo, const Dims3& hi) {
  float sum = 0.0f;
  for (int64_t z = lo[0]; z < hi[0]; ++z) {
    for (int64_t y = lo[1]; y < hi[1]; ++y) {
      for (int64_t w = lo[2]; w < hi[2]; ++w) sum += x[(z * g.in[1] + y) * g.in[2] + w];
    }
  }
  return sum;
}

class MaxPool3dKernel final : public Kernel {
 public:
  explicit MaxPool3dKernel(Pool3d g) : g_(g) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const Pool3d& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    ForEachOutput(g, [&](int64_t plane, const Dims3& o, int64_t at) {
      Dims3 lo, hi;
      for (int i = 0; i < 3; ++i) {
        lo[i] = o[i] * g.s[i] - g.p[i];
        hi[i] = std::min(lo[i] + (g.k[i] - 1) * g.d[i] + 1, g.in[i]);
        while (lo[i] < 0) lo[i] += g.d[i];
      }
      out[at] = WindowMax(in + plane * g.InPlane(), g, lo, hi, g.d, &indices[at]);
    });
    return absl::OkStatus();
  }

 private:
  Pool3d g_;
};

class AvgPool3dKernel final : public Kernel {
 public:
  AvgPool3dKernel(Pool3d g, bool count_include_pad, std::optional<int64_t> divisor_override)
      : g_(g), count_include_pad_(count_include_pad), divisor_override_(divisor_override) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const Pool3d& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ForEachOutput(g, [&](int64_t plane, const Dims3& o, int64_t at) {
      Dims3 lo, hi;
      int64_t pool_size = 1, count = 1;
      for (int i = 0; i < 3; ++i) {
        lo[i] = o[i] * g.s[i] - g.p[i];
        hi[i] = std::min(lo[i] + g.k[i], g.in[i] + g.p[i]);
        pool_size *= hi[i] - lo[i];
        lo[i] = std::max<int64_t>(lo[i], 0);
        hi[i] = std::min(hi[i], g.in[i]);
        count *= std::max<int64_t>(hi[i] - lo[i], 0);
      }
      if (count == 0) {
        out[at] = 0.0f;
        return;
      }
      const int64_t divisor = divisor_override_  ? *divisor_override_
                              : count_include_pad_ ? pool_size
                                                   : count;
      out[at] = WindowSum(in + plane * g.InPlane(), g, lo, hi) / static_cast<float>(divisor);
    });
    return absl::OkStatus();
  }

 private:
  Pool3d g_;
  bool count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

// ATen's adaptive window of output index o: [floor(o*in/out), ceil((o+1)*in/out)).
void AdaptiveWindow(const Pool3d& g, const Dims3& o, Dims3* lo, Dims3* hi) {
  for (int i = 0; i < 3; ++i) {
    (*lo)[i] = AdaptiveStart(o[i], g.in[i], g.out[i]);
    (*hi)[i] = AdaptiveEnd(o[i], g.in[i], g.out[i]);
  }
}

template <bool kMax>
class AdaptivePool3dKernel final : public Kernel {
 public:
  explicit AdaptivePool3dKernel(Pool3d g) : g_(g) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const Pool3d& g = g_;
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    ForEachOutput(g, [&](int64_t plane, const Dims3& o, int64_t at) {
      Dims3 lo, hi;
      AdaptiveWindow(g, o, &lo, &hi);
      const float* x = in + plane * g.InPlane();
      if constexpr (kMax) {
        out[at] = WindowMax(x, g, lo, hi, Dims3{1, 1, 1}, &ctx.outputs[1].as<int64_t>()[at]);
      } else {
        const int64_t count = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
        out[at] = WindowSum(x, g, lo, hi) / static_cast<float>(count);
      }
    });
    return absl::OkStatus();
  }

 private:
  Pool3d g_;
};

// Checks the input (CDHW or NCDHW, f32, non-empty) and fills planes and
// in; returns the leading dims to which the output's D, H, W are appended.
absl::StatusOr<std::vector<int64_t>> ReadInput(const NodeArgs& args, Pool3d* g) {
  KILN_ASSIGN_OR_RETURN(TensorMeta input, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, input, "self"));
  const int r = input.rank();
  if (r != 4 && r != 5) {
    return args.Error(
        absl::StrCat("expected a 4-D (CDHW) or 5-D (NCDHW) input, got ", input.ToString()));
  }
  for (int d = r - 4; d < r; ++d) {
    if (input.shape[d] == 0) {
      return args.Error(absl::StrCat("input ", input.ToString(),
                                     " must have non-zero channel and spatial sizes"));
    }
  }
  g->planes = Product(input.shape, 0, r - 3);
  for (int i = 0; i < 3; ++i) g->in[i] = input.shape[r - 3 + i];
  return std::vector<int64_t>(input.shape.begin(), input.shape.end() - 3);
}

// A list of one value or three (position pos), or `def` when absent.
absl::StatusOr<Dims3> Triple(const NodeArgs& args, int pos, const char* name,
                             std::vector<int64_t> def) {
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> list, args.IntList(pos, name, std::move(def)));
  return ExpandArray<3>(args, list, name);
}

// kernel_size, stride (empty: the kernel size), padding and, with
// `dilation_pos` >= 0, dilation; checked as ATen's pool3d_shape_check does,
// and the output size from them.
absl::Status ReadWindow3d(const NodeArgs& args, int dilation_pos, bool ceil_mode, Pool3d* g) {
  KILN_ASSIGN_OR_RETURN(g->k, Triple(args, 1, "kernel_size", {}));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> s_list, args.IntList(2, "stride", {}));
  if (s_list.empty()) {
    g->s = g->k;
  } else {
    KILN_ASSIGN_OR_RETURN(g->s, Triple(args, 2, "stride", {}));
  }
  KILN_ASSIGN_OR_RETURN(g->p, Triple(args, 3, "padding", {0}));
  if (dilation_pos >= 0) {
    KILN_ASSIGN_OR_RETURN(g->d, Triple(args, dilation_pos, "dilation", {1}));
  }
  for (int i = 0; i < 3; ++i) {
    if (g->k[i] <= 0 || g->s[i] <= 0 || g->d[i] <= 0) {
      return args.Error("kernel_size, stride and dilation must be positive");
    }
    if (g->p[i] < 0 || g->p[i] > g->k[i] / 2) {
      return args.Error("padding must be between 0 and half the kernel size");
    }
    g->out[i] = PoolOutputSize(g->in[i], g->k[i], g->p[i], g->s[i], g->d[i], ceil_mode);
    if (g->out[i] < 1) {
      return args.Error(absl::StrCat("input size ", g->in[i], " in spatial dim ", i,
                                     " gives an output size of ", g->out[i]));
    }
  }
  return absl::OkStatus();
}

// output_size (one or three non-negative values).
absl::Status ReadAdaptiveSize3d(const NodeArgs& args, Pool3d* g) {
  KILN_ASSIGN_OR_RETURN(g->out, Triple(args, 1, "output_size", {}));
  for (int64_t o : g->out) {
    if (o < 0) return args.Error("output_size must be non-negative");
  }
  return absl::OkStatus();
}

std::vector<int64_t> WithSpatial(std::vector<int64_t> lead, const Dims3& out) {
  lead.insert(lead.end(), out.begin(), out.end());
  return lead;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareMaxPool3dWithIndices(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False)
  Pool3d g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, ReadInput(args, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(5, "ceil_mode", false));
  KILN_RETURN_IF_ERROR(ReadWindow3d(args, /*dilation_pos=*/4, ceil_mode, &g));
  const std::vector<int64_t> shape = WithSpatial(lead, g.out);
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, shape}, TensorMeta{DType::kI64, shape}};
  op.kernel = std::make_unique<MaxPool3dKernel>(g);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAvgPool3d(const NodeArgs& args) {
  // (self, kernel_size, stride=[], padding=0, ceil_mode=False,
  //  count_include_pad=True, divisor_override=None)
  Pool3d g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, ReadInput(args, &g));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, args.Bool(4, "ceil_mode", false));
  KILN_ASSIGN_OR_RETURN(bool count_include_pad, args.Bool(5, "count_include_pad", true));
  std::optional<int64_t> divisor;
  if (args.Find(6, "divisor_override") != nullptr) {
    KILN_ASSIGN_OR_RETURN(divisor, args.Int(6, "divisor_override"));
    if (*divisor == 0) return args.Error("divisor_override must be non-zero");
  }
  KILN_RETURN_IF_ERROR(ReadWindow3d(args, /*dilation_pos=*/-1, ceil_mode, &g));
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, WithSpatial(lead, g.out)}};
  op.kernel = std::make_unique<AvgPool3dKernel>(g, count_include_pad, divisor);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAdaptiveAvgPool3d(const NodeArgs& args) {
  // (self, output_size[3])
  Pool3d g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, ReadInput(args, &g));
  KILN_RETURN_IF_ERROR(ReadAdaptiveSize3d(args, &g));
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, WithSpatial(lead, g.out)}};
  op.kernel = std::make_unique<AdaptivePool3dKernel</*kMax=*/false>>(g);
  return op;
}

absl::StatusOr<PreparedOp> PrepareAdaptiveMaxPool3d(const NodeArgs& args) {
  // (self, output_size[3]) -> (out, indices)
  Pool3d g;
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> lead, ReadInput(args, &g));
  KILN_RETURN_IF_ERROR(ReadAdaptiveSize3d(args, &g));
  const std::vector<int64_t> shape = WithSpatial(lead, g.out);
  PreparedOp op;
  op.outputs = {TensorMeta{DType::kF32, shape}, TensorMeta{DType::kI64, shape}};
  op.kernel = std::make_unique<AdaptivePool3dKernel</*kMax=*/true>>(g);
  return op;
}

}  // namespace kiln::runtime
