// Elementwise math on f32 tensors: aten.neg, aten.abs, aten.exp, aten.log,
// aten.sqrt, aten.rsqrt, aten.sin, aten.cos, aten.tanh and
// aten.pow.Tensor_Scalar
// (activations such as sigmoid, silu and gelu are in activations.cc).
//
// Each is one pass of a stateless functor over the flat tensor, in
// parallel chunks: exp and tanh with the 8-lane functions of
// vector_math.h, the others with libm's float functions.
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/vector_math.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kGrain = int64_t{1} << 14;

template <typename F>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(int64_t n, F f) : n_(n), f_(f) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const F f = f_;
    ParallelFor(n_, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = f(in[i]);
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_;
  F f_;
};

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

template <typename F>
absl::StatusOr<PreparedOp> Unary(const NodeArgs& args, F f) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<UnaryKernel<F>>(self.NumElements(), f);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareNeg(const NodeArgs& args) {
  return Unary(args, [](float x) { return -x; });
}

absl::StatusOr<PreparedOp> PrepareAbs(const NodeArgs& args) {
  return Unary(args, [](float x) { return std::fabs(x); });
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
