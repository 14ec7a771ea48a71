// Normalizations over f32 tensors that return their statistics too:
//   aten.native_layer_norm.default (input, normalized_shape, weight?,
//     bias?, eps) -> (out, mean, rstd), stats shaped input[:axis] + [1]*k;
//   aten.native_group_norm.default (input, weight?, bias?, N, C, HxW,
//     group, eps) -> (out, mean [N, group], rstd [N, group]);
//   kiln.group_norm_nhwc, its channels-last form (passes/channels_last.cc)
//     over [N, H, W, C], the output alone.
// Each normalized group is contiguous (but in channels-last, where a
// group is a run of channels in every pixel); statistics accumulate in double
// (two passes: mean, then centred variance), so they are at least as
// accurate as ATen's float Welford. A group too large for one thread (one
// group over a whole feature map) is summed by every thread in chunks.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Sum of x[0, n) and sum of (x - mean)^2, in double. Eight independent
// accumulators: a single one makes every add wait for the previous one
// (and the compiler may not reorder double adds), which left a group norm
// over a whole feature map far slower than a pass over memory.
inline double SumOf(const float* x, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j];
  }
  double tail = 0.0;
  for (; i < n; ++i) tail += x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) +
         tail;
}

inline double SquaredDeviations(const float* x, int64_t n, double mean) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double d = x[i + j] - mean;
      acc[j] += d * d;
    }
  }
  double tail = 0.0;
  for (; i < n; ++i) {
    const double d = x[i] - mean;
    tail += d * d;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) +
         tail;
}

void StoreMoments(double sum, double squares, int64_t n, double eps, float* mean_out,
                  float* rstd_out) {
  const double var = n > 0 ? squares / static_cast<double>(n) : 0.0;
  *mean_out = static_cast<float>(n > 0 ? sum / static_cast<double>(n) : 0.0);
  *rstd_out = static_cast<float>(1.0 / std::sqrt(var + eps));
}

// Mean and 1/sqrt(var + eps) of n contiguous floats.
inline void Moments(const float* x, int64_t n, double eps, float* mean_out,
                    float* rstd_out) {
  const double sum = SumOf(x, n);
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  StoreMoments(sum, SquaredDeviations(x, n, mean), n, eps, mean_out, rstd_out);
}

// Moments of one large group with every thread: each pass sums fixed
// chunks in parallel (kMaxChunks partial sums), then adds the partials in
// order, so the result does not depend on the thread count.
constexpr int64_t kMaxChunks = 64;
void ParallelMoments(const float* x, int64_t n, double eps, float* mean_out, float* rstd_out) {
  const int64_t chunk = std::max<int64_t>(int64_t{1} << 13, (n + kMaxChunks - 1) / kMaxChunks);
  const int64_t chunks = (n + chunk - 1) / chunk;
  double partial[kMaxChunks];
  ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) partial[k] = SumOf(x + k * chunk, std::min(chunk, n - k * chunk));
  });
  double sum = 0.0;
  for (int64_t k = 0; k < chunks; ++k) sum += partial[k];
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      partial[k] = SquaredDeviations(x + k * chunk, std::min(chunk, n - k * chunk), mean);
    }
  });
  double squares = 0.0;
  for (int64_t k = 0; k < chunks; ++k) squares += partial[k];
  StoreMoments(sum, squares, n, eps, mean_out, rstd_out);
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

// A group norm's sizes and input slots (weight and bias -1 when absent),
// in either layout.
struct GroupNormSpec {
  int64_t n = 0, c = 0, hw = 0, g = 1;
  double eps = 0.0;
  int x = -1, w = -1, b = -1;
};

// Channel ch of a group of mean mu and 1/std rs normalizes as
// y = x * scale + shift, the affine folded in.
inline void ChannelAffine(float mu, float rs, const float* w, const float* bias, int64_t ch,
                          float* scale, float* shift) {
  const float wc = w != nullptr ? w[ch] : 1.0f;
  const float bc = bias != nullptr ? bias[ch] : 0.0f;
  *scale = rs * wc;
  *shift = bc - mu * *scale;
}

class GroupNormKernel final : public Kernel {
 public:
  explicit GroupNormKernel(GroupNormSpec s)
      : n_(s.n), c_(s.c), hw_(s.hw), g_(s.g), eps_(s.eps), x_(s.x), w_(s.w), b_(s.b) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[x_].as<const float>();
    const float* w = w_ >= 0 ? ctx.inputs[w_].as<const float>() : nullptr;
    const float* bias = b_ >= 0 ? ctx.inputs[b_].as<const float>() : nullptr;
    float* out = ctx.outputs[0].as<float>();
    float* mean = ctx.outputs[1].as<float>();
    float* rstd = ctx.outputs[2].as<float>();
    const int64_t cpg = c_ / g_;
    const int64_t group_elems = cpg * hw_;
    // y = x * scale + shift per channel of group ng.
    auto normalize = [&](int64_t ng, int64_t c_begin, int64_t c_end) {
      const float mu = mean[ng], rs = rstd[ng];
      const int64_t c0 = (ng % g_) * cpg;
      for (int64_t c = c_begin; c < c_end; ++c) {
        float scale, shift;
        ChannelAffine(mu, rs, w, bias, c0 + c, &scale, &shift);
        const float* xc = x + ng * group_elems + c * hw_;
        float* yc = out + ng * group_elems + c * hw_;
        for (int64_t i = 0; i < hw_; ++i) yc[i] = xc[i] * scale + shift;
      }
    };
    if (n_ * g_ >= 2 * MaxWorkers()) {
      ParallelFor(n_ * g_, 1, [&](int64_t b, int64_t e) {
        for (int64_t ng = b; ng < e; ++ng) {
          Moments(x + ng * group_elems, group_elems, eps_, &mean[ng], &rstd[ng]);
          normalize(ng, 0, cpg);
        }
      });
      return absl::OkStatus();
    }
    // Fewer groups than threads to keep busy (GroupNorm(1, C) at batch 1):
    // every thread works on each group.
    for (int64_t ng = 0; ng < n_ * g_; ++ng) {
      ParallelMoments(x + ng * group_elems, group_elems, eps_, &mean[ng], &rstd[ng]);
      ParallelFor(cpg, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(hw_, 1)),
                  [&](int64_t b, int64_t e) { normalize(ng, b, e); });
    }
    return absl::OkStatus();
  }

 private:
  int64_t n_, c_, hw_, g_;
  double eps_;
  int x_, w_, b_;
};

// Group norm over channels-last [N, HW, C]: group g is channels
// [g * C/G, (g + 1) * C/G) of every pixel. Each pass sums fixed chunks of
// pixels in parallel (a partial sum per chunk and group), then adds the
// partials in order, so the result does not depend on the thread count.
class GroupNormNhwcKernel final : public Kernel {
 public:
  explicit GroupNormNhwcKernel(GroupNormSpec s)
      : n_(s.n), c_(s.c), hw_(s.hw), g_(s.g), eps_(s.eps), x_(s.x), w_(s.w), b_(s.b),
        pixels_per_chunk_(std::max({int64_t{1}, (int64_t{1} << 13) / std::max<int64_t>(c_, 1),
                                    (hw_ + kMaxChunks - 1) / kMaxChunks})),
        chunks_((hw_ + pixels_per_chunk_ - 1) / pixels_per_chunk_) {}

  // Partial sums (chunk x group) and group means in double, then each
  // channel's scale and shift.
  size_t ScratchBytes() const override {
    return static_cast<size_t>((chunks_ + 1) * g_) * sizeof(double) +
           static_cast<size_t>(2 * c_) * sizeof(float);
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[x_].as<const float>();
    const float* w = w_ >= 0 ? ctx.inputs[w_].as<const float>() : nullptr;
    const float* bias = b_ >= 0 ? ctx.inputs[b_].as<const float>() : nullptr;
    float* out = ctx.outputs[0].as<float>();
    if (n_ * c_ * hw_ == 0) return absl::OkStatus();
    const int64_t cpg = c_ / g_, c = c_;
    const int64_t pixels_per_chunk = pixels_per_chunk_, chunks = chunks_;
    double* partial = static_cast<double*>(ctx.scratch);
    double* group_mean = partial + chunks * g_;
    float* scale = reinterpret_cast<float*>(group_mean + g_);
    float* shift = scale + c;
    const double count = static_cast<double>(cpg * hw_);
    for (int64_t n = 0; n < n_; ++n) {
      const float* xn = x + n * hw_ * c;
      float* yn = out + n * hw_ * c;
      // pass(k, g, run): the sum over chunk k's pixels of run(group g's
      // channels of a pixel).
      auto sum_pass = [&](auto run) {
        ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            const int64_t p1 = std::min(hw_, (k + 1) * pixels_per_chunk);
            for (int64_t g = 0; g < g_; ++g) {
              double acc = 0.0;
              for (int64_t p = k * pixels_per_chunk; p < p1; ++p) {
                acc += run(xn + p * c + g * cpg, g);
              }
              partial[k * g_ + g] = acc;
            }
          }
        });
      };
      sum_pass([&](const float* v, int64_t) { return SumOf(v, cpg); });
      for (int64_t g = 0; g < g_; ++g) {
        double sum = 0.0;
        for (int64_t k = 0; k < chunks; ++k) sum += partial[k * g_ + g];
        group_mean[g] = sum / count;
      }
      sum_pass([&](const float* v, int64_t g) { return SquaredDeviations(v, cpg, group_mean[g]); });
      for (int64_t g = 0; g < g_; ++g) {
        double squares = 0.0;
        for (int64_t k = 0; k < chunks; ++k) squares += partial[k * g_ + g];
        float mu = 0.0f, rs = 0.0f;
        StoreMoments(group_mean[g] * count, squares, cpg * hw_, eps_, &mu, &rs);
        for (int64_t ch = g * cpg; ch < (g + 1) * cpg; ++ch) {
          ChannelAffine(mu, rs, w, bias, ch, &scale[ch], &shift[ch]);
        }
      }
      const float* sc = scale;
      const float* sh = shift;
      ParallelFor(hw_, std::max<int64_t>(1, (int64_t{1} << 14) / c), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const float* xp = xn + p * c;
          float* yp = yn + p * c;
          for (int64_t ch = 0; ch < c; ++ch) yp[ch] = xp[ch] * sc[ch] + sh[ch];
        }
      });
    }
    return absl::OkStatus();
  }

 private:
  int64_t n_, c_, hw_, g_;
  double eps_;
  int x_, w_, b_;
  int64_t pixels_per_chunk_, chunks_;
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

namespace {

// Both forms' arguments: (input, weight?, bias?, N, C, HxW, group, eps),
// input [N, C, *] (nhwc: [N, *, C]).
absl::StatusOr<PreparedOp> PrepareGroupNormOf(const NodeArgs& args, bool nhwc) {
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
  const int channel_dim = nhwc ? input.rank() - 1 : 1;
  if (input.rank() < 2 || input.shape[0] != n || input.shape[channel_dim] != c ||
      input.NumElements() != n * c * hw) {
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
  const GroupNormSpec spec{n, c, hw, group, eps, InputIndex(args, 0, "input"),
                           InputIndex(args, 1, "weight"), InputIndex(args, 2, "bias")};
  PreparedOp op;
  if (nhwc) {
    op.outputs = {input};
    op.kernel = std::make_unique<GroupNormNhwcKernel>(spec);
    return op;
  }
  op.outputs = {input, TensorMeta{DType::kF32, {n, group}},
                TensorMeta{DType::kF32, {n, group}}};
  op.kernel = std::make_unique<GroupNormKernel>(spec);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareNativeGroupNorm(const NodeArgs& args) {
  return PrepareGroupNormOf(args, /*nhwc=*/false);
}

absl::StatusOr<PreparedOp> PrepareGroupNormNhwc(const NodeArgs& args) {
  return PrepareGroupNormOf(args, /*nhwc=*/true);
}

}  // namespace kiln::runtime
