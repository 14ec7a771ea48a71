// Elementwise math on f32 tensors: powers, exponentials and logarithms,
// trigonometric and hyperbolic functions and their inverses, erf, lgamma,
// rounding, and aten.pow.Tensor_Scalar; aten.neg, aten.abs and aten.sign
// on i64 tensors too
// (activations such as sigmoid, silu and gelu are in activations.cc).
//
// Each is one pass of a stateless functor over the flat tensor, in
// parallel chunks: exp and tanh with the 8-lane functions of
// vector_math.h, the others with libm's float functions (as ATen's
// scalar fallbacks compute them).
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/unary_kernel.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kGrain = kUnaryGrain;

// Same, with a vector function (__m256 -> __m256) over 8 lanes at a time.
template <typename F>
class VectorUnaryKernel final : public Kernel {
 public:
  VectorUnaryKernel(int64_t n, F f) : n_(n), f_(f) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const F f = f_;
    ParallelFor(n_, kGrain, [&](int64_t b, int64_t e) { vmath::Map(in + b, out + b, e - b, f); });
    return absl::OkStatus();
  }

 private:
  int64_t n_;
  F f_;
};

template <typename F>
absl::StatusOr<PreparedOp> VectorUnary(const NodeArgs& args, F f) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<VectorUnaryKernel<F>>(self.NumElements(), f);
  return op;
}

// f32 through f, i64 through g (ops defined on both).
template <typename F, typename G>
absl::StatusOr<PreparedOp> FloatOrIntUnary(const NodeArgs& args, F f, G g) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (self.dtype != DType::kI64) return Unary(args, f);
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<UnaryKernel<G, int64_t>>(self.NumElements(), g);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareNeg(const NodeArgs& args) {
  // Two's complement wraps INT64_MIN to itself, as ATen does.
  return FloatOrIntUnary(
      args, [](float x) { return -x; },
      [](int64_t x) { return static_cast<int64_t>(0ull - static_cast<uint64_t>(x)); });
}

absl::StatusOr<PreparedOp> PrepareAbs(const NodeArgs& args) {
  return FloatOrIntUnary(
      args, [](float x) { return std::fabs(x); },
      [](int64_t x) { return x < 0 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(x)) : x; });
}

absl::StatusOr<PreparedOp> PrepareSign(const NodeArgs& args) {
  // NaN gives 0, as in ATen.
  return FloatOrIntUnary(
      args, [](float x) { return static_cast<float>((x > 0.f) - (x < 0.f)); },
      [](int64_t x) { return static_cast<int64_t>((x > 0) - (x < 0)); });
}

absl::StatusOr<PreparedOp> PrepareReciprocal(const NodeArgs& args) {
  return Unary(args, [](float x) { return 1.0f / x; });
}

absl::StatusOr<PreparedOp> PrepareExpm1(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::expm1(x); });
}

absl::StatusOr<PreparedOp> PrepareExp2(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::exp2(x); });
}

absl::StatusOr<PreparedOp> PrepareLog1p(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::log1p(x); });
}

absl::StatusOr<PreparedOp> PrepareLog2(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::log2(x); });
}

absl::StatusOr<PreparedOp> PrepareLog10(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::log10(x); });
}

absl::StatusOr<PreparedOp> PrepareTan(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::tan(x); });
}

absl::StatusOr<PreparedOp> PrepareAsin(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::asin(x); });
}

absl::StatusOr<PreparedOp> PrepareAcos(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::acos(x); });
}

absl::StatusOr<PreparedOp> PrepareAtan(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::atan(x); });
}

absl::StatusOr<PreparedOp> PrepareSinh(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::sinh(x); });
}

absl::StatusOr<PreparedOp> PrepareCosh(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::cosh(x); });
}

absl::StatusOr<PreparedOp> PrepareAsinh(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::asinh(x); });
}

absl::StatusOr<PreparedOp> PrepareAcosh(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::acosh(x); });
}

absl::StatusOr<PreparedOp> PrepareAtanh(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::atanh(x); });
}

absl::StatusOr<PreparedOp> PrepareErf(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::erf(x); });
}

absl::StatusOr<PreparedOp> PrepareErfc(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::erfc(x); });
}

absl::StatusOr<PreparedOp> PrepareLgamma(const NodeArgs& args) {
  // lgammaf_r: std::lgamma writes the global signgam, a race across threads.
  return Unary(args, [](float x) {
    int sign;
    return lgammaf_r(x, &sign);
  });
}

absl::StatusOr<PreparedOp> PrepareFloor(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::floor(x); });
}

absl::StatusOr<PreparedOp> PrepareCeil(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::ceil(x); });
}

absl::StatusOr<PreparedOp> PrepareTrunc(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::trunc(x); });
}

absl::StatusOr<PreparedOp> PrepareRoundDecimals(const NodeArgs& args) {
  // (self, *, decimals): as ATen, scaled by 10^|decimals| in float, rounded
  // halves to even, scaled back.
  KILN_ASSIGN_OR_RETURN(int64_t decimals, args.Int(1, "decimals"));
  if (decimals > 38 || decimals < -38) return args.Unimplemented("|decimals| above 38");
  const bool neg = decimals < 0;
  const float ten_pow = static_cast<float>(std::pow(10.0, static_cast<double>(neg ? -decimals : decimals)));
  if (neg) return Unary(args, [ten_pow](float x) { return std::nearbyint(x / ten_pow) * ten_pow; });
  return Unary(args, [ten_pow](float x) { return std::nearbyint(x * ten_pow) / ten_pow; });
}

absl::StatusOr<PreparedOp> PrepareRound(const NodeArgs& args) {
  // Halves to even (the default rounding mode), as ATen rounds.
  return Unary(args, [](float x) { return std::nearbyint(x); });
}

absl::StatusOr<PreparedOp> PrepareLog(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::log(x); });
}

absl::StatusOr<PreparedOp> PrepareExp(const NodeArgs& args) {
  return VectorUnary(args, [](__m256 x) { return vmath::Exp(x); });
}

absl::StatusOr<PreparedOp> PrepareSqrt(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::sqrt(x); });
}

absl::StatusOr<PreparedOp> PrepareRsqrt(const NodeArgs& args) {
  return Unary(args, [](float x) { return 1.0f / std::sqrt(x); });
}

absl::StatusOr<PreparedOp> PrepareSin(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::sin(x); });
}

absl::StatusOr<PreparedOp> PrepareCos(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::cos(x); });
}

absl::StatusOr<PreparedOp> PrepareTanh(const NodeArgs& args) {
  return VectorUnary(args, [](__m256 x) { return vmath::Tanh(x); });
}

absl::StatusOr<PreparedOp> PreparePowTensorScalar(const NodeArgs& args) {
  // (self, exponent): the exponents ATen special-cases are computed the
  // same way here so results match bit for bit where it matters.
  KILN_ASSIGN_OR_RETURN(double e, args.Float(1, "exponent"));
  if (e == 2.0) return Unary(args, [](float x) { return x * x; });
  if (e == 3.0) return Unary(args, [](float x) { return x * x * x; });
  if (e == 1.0) return Unary(args, [](float x) { return x; });
  if (e == 0.5) return Unary(args, [](float x) { return std::sqrt(x); });
  if (e == -0.5) return Unary(args, [](float x) { return 1.0f / std::sqrt(x); });
  if (e == -1.0) return Unary(args, [](float x) { return 1.0f / x; });
  if (e == -2.0) return Unary(args, [](float x) { return 1.0f / (x * x); });
  const float ef = static_cast<float>(e);
  return Unary(args, [ef](float x) { return std::pow(x, ef); });
}

}  // namespace kiln::runtime
