// Pointwise f32 activations: aten.clamp.default, aten.hardtanh.default,
// aten.sigmoid.default, aten.gelu.default (exact erf and approximate
// "tanh"), aten.hardswish.default, aten.hardsigmoid.default,
// aten.silu.default, aten.leaky_relu.default and aten.elu.default, with
// ATen's formulas and NaN behaviour.
//
// One kernel class; the op is picked once per Run and each op's loop is a
// plain loop over a contiguous chunk. The transcendental ones use the
// vector math of vector_math.h: a few ulp from the exact result, without
// the cancellation ATen's formulas have in gelu's negative tail, and with
// their results at NaN and the infinities.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Transcendental ops (vector_math.h) still do several times the work of a
// clamp per element.
constexpr int64_t kCheapGrain = int64_t{1} << 15;
constexpr int64_t kCostlyGrain = int64_t{1} << 12;

enum class Activation {
  kClamp,  // also hardtanh
  kSigmoid,
  kGeluErf,
  kGeluTanh,
  kHardswish,
  kHardsigmoid,
  kSilu,
  kLeakyRelu,  // lo: the negative slope
  kElu,        // lo: alpha * scale, hi: scale, in_scale: input_scale
};

class ActivationKernel final : public Kernel {
 public:
  ActivationKernel(Activation act, int64_t n, float lo = 0.0f, float hi = 0.0f,
                   float in_scale = 1.0f)
      : act_(act), n_(n), lo_(lo), hi_(hi), in_scale_(in_scale) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const float lo = lo_, hi = hi_, in_scale = in_scale_;
    const Activation act = act_;
    const int64_t grain =
        act == Activation::kClamp || act == Activation::kHardswish ||
                act == Activation::kHardsigmoid || act == Activation::kLeakyRelu
            ? kCheapGrain
            : kCostlyGrain;
    ParallelFor(n_, grain, [&](int64_t b, int64_t e) {
      switch (act) {
        case Activation::kClamp:
          // ATen: NaN stays NaN; with lo > hi every value becomes hi.
          for (int64_t i = b; i < e; ++i) {
            const float x = in[i];
            out[i] = x != x ? x : std::min(std::max(x, lo), hi);
          }
          break;
        case Activation::kSigmoid:
          vmath::Map(in + b, out + b, e - b, [](__m256 v) { return vmath::Sigmoid(v); });
          break;
        case Activation::kGeluErf:
          vmath::Map(in + b, out + b, e - b, [](__m256 v) { return vmath::GeluErf(v); });
          break;
        case Activation::kGeluTanh:
          vmath::Map(in + b, out + b, e - b, [](__m256 v) { return vmath::GeluTanh(v); });
          break;
        case Activation::kHardswish:
          for (int64_t i = b; i < e; ++i) {
            const float x = in[i];
            out[i] = x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;
          }
          break;
        case Activation::kHardsigmoid:
          for (int64_t i = b; i < e; ++i) {
            out[i] = std::min(std::max(in[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
          }
          break;
        case Activation::kSilu:
          vmath::Map(in + b, out + b, e - b, [](__m256 v) { return vmath::Silu(v); });
          break;
        case Activation::kLeakyRelu:
          for (int64_t i = b; i < e; ++i) {
            const float x = in[i];
            out[i] = x > 0.0f ? x : x * lo;
          }
          break;
        case Activation::kElu:
          for (int64_t i = b; i < e; ++i) {
            const float x = in[i];
            out[i] = x <= 0.0f ? std::expm1(x * in_scale) * lo : x * hi;
          }
          break;
      }
    });
    return absl::OkStatus();
  }

 private:
  Activation act_;
  int64_t n_;
  float lo_, hi_, in_scale_;
};

absl::StatusOr<TensorMeta> F32Self(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  return self;
}

PreparedOp MakeOp(const TensorMeta& self, Activation act, float lo = 0.0f,
                  float hi = 0.0f) {
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel =
      std::make_unique<ActivationKernel>(act, self.NumElements(), lo, hi);
  return op;
}

// An optional Scalar bound (`Scalar? min`): nullopt when absent or None.
absl::StatusOr<std::optional<double>> OptionalBound(const NodeArgs& args,
                                                    int pos,
                                                    const char* name) {
  const Arg* arg = args.Find(pos, name);
  if (arg == nullptr) return std::optional<double>();
  if (arg->kind == Arg::Kind::kTensor) {
    return args.Unimplemented(
        absl::StrCat(name, " as a tensor is not supported (only a number)"));
  }
  KILN_ASSIGN_OR_RETURN(double v, args.Float(pos, name));
  return std::optional<double>(v);
}

}  // namespace

// binary_math.cc: clamp of i64 tensors and with tensor bounds.
absl::StatusOr<PreparedOp> PrepareTypedClamp(const NodeArgs& args);

absl::StatusOr<PreparedOp> PrepareClampTensor(const NodeArgs& args) {
  return PrepareTypedClamp(args);
}

absl::StatusOr<PreparedOp> PrepareClamp(const NodeArgs& args) {
  // (self, min: Scalar?=None, max: Scalar?=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta raw, args.Tensor(0, "self"));
  if (raw.dtype == DType::kI64) return PrepareTypedClamp(args);
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  KILN_ASSIGN_OR_RETURN(std::optional<double> lo, OptionalBound(args, 1, "min"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> hi, OptionalBound(args, 2, "max"));
  if (!lo && !hi) {
    return args.Error("at least one of 'min' or 'max' must not be None");
  }
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return MakeOp(self, Activation::kClamp,
                lo ? static_cast<float>(*lo) : -kInf,
                hi ? static_cast<float>(*hi) : kInf);
}

absl::StatusOr<PreparedOp> PrepareHardtanh(const NodeArgs& args) {
  // (self, min_val=-1, max_val=1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  KILN_ASSIGN_OR_RETURN(double lo, args.Float(1, "min_val", -1.0));
  KILN_ASSIGN_OR_RETURN(double hi, args.Float(2, "max_val", 1.0));
  return MakeOp(self, Activation::kClamp, static_cast<float>(lo),
                static_cast<float>(hi));
}

absl::StatusOr<PreparedOp> PrepareLeakyRelu(const NodeArgs& args) {
  // (self, negative_slope=0.01)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  KILN_ASSIGN_OR_RETURN(double slope, args.Float(1, "negative_slope", 0.01));
  return MakeOp(self, Activation::kLeakyRelu, static_cast<float>(slope));
}

absl::StatusOr<PreparedOp> PrepareElu(const NodeArgs& args) {
  // (self, alpha=1, scale=1, input_scale=1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  KILN_ASSIGN_OR_RETURN(double alpha, args.Float(1, "alpha", 1.0));
  KILN_ASSIGN_OR_RETURN(double scale, args.Float(2, "scale", 1.0));
  KILN_ASSIGN_OR_RETURN(double input_scale, args.Float(3, "input_scale", 1.0));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<ActivationKernel>(
      Activation::kElu, self.NumElements(), static_cast<float>(alpha * scale),
      static_cast<float>(scale), static_cast<float>(input_scale));
  return op;
}

absl::StatusOr<PreparedOp> PrepareSigmoid(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  return MakeOp(self, Activation::kSigmoid);
}

absl::StatusOr<PreparedOp> PrepareGelu(const NodeArgs& args) {
  // (self, *, approximate='none')
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  Activation act = Activation::kGeluErf;
  if (const Arg* a = args.Find(1, "approximate")) {
    if (a->kind != Arg::Kind::kString) {
      return args.Error("approximate must be a string");
    }
    if (a->s == "tanh") {
      act = Activation::kGeluTanh;
    } else if (a->s != "none") {
      return args.Error(absl::StrCat("approximate must be 'none' or 'tanh', got '",
                                     a->s, "'"));
    }
  }
  return MakeOp(self, act);
}

absl::StatusOr<PreparedOp> PrepareHardswish(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  return MakeOp(self, Activation::kHardswish);
}

absl::StatusOr<PreparedOp> PrepareHardsigmoid(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  return MakeOp(self, Activation::kHardsigmoid);
}

absl::StatusOr<PreparedOp> PrepareSilu(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, F32Self(args));
  return MakeOp(self, Activation::kSilu);
}

}  // namespace kiln::runtime
