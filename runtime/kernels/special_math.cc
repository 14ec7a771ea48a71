// The special functions of aten and torch.special on f32 tensors: digamma
// and polygamma, Hurwitz zeta, erfinv, ndtri, erfcx, the Bessel functions
// (J, Y, I, K, exponentially scaled, spherical) and Airy Ai, the
// regularized incomplete gamma functions, and the orthogonal polynomials
// (Chebyshev of four kinds and their shifted forms, Hermite, Laguerre,
// Legendre) whose degree is a tensor too; and angle and nextafter of
// real numbers.
//
// Each element is computed in double by special_functions.h and rounded
// to float, which is at least as accurate as ATen's float kernels; the
// values ATen gives at poles, infinities and outside the domain are kept.
// Integer operands of the two-argument ones are converted to f32 first,
// as ATen promotes them.
#include <cmath>

#include "runtime/kernels/special_functions.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/kernels/unary_kernel.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

template <double (*F)(double)>
absl::StatusOr<PreparedOp> Special(const NodeArgs& args, const char* name = "self") {
  return Unary(
      args, [](float x) { return static_cast<float>(F(static_cast<double>(x))); }, 0, name);
}

// out = F(a, b) over the broadcast of two operands (tensors or numbers).
template <double (*F)(double, double)>
absl::StatusOr<PreparedOp> Special2(const NodeArgs& args, const char* a_name,
                                    const char* b_name) {
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, a_name));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, b_name));
  if (!a.is_tensor && !b.is_tensor) return args.Error("one operand must be a tensor");
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastOperands(args, {&a, &b}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  op.kernel = MakeBinaryKernel<float, float>(a, b, shape, DType::kF32, [](float x, float y) {
    return static_cast<float>(F(static_cast<double>(x), static_cast<double>(y)));
  });
  return op;
}

}  // namespace

namespace sp = special;

absl::StatusOr<PreparedOp> PrepareDigamma(const NodeArgs& args) { return Special<sp::Digamma>(args); }
absl::StatusOr<PreparedOp> PrepareErfinv(const NodeArgs& args) { return Special<sp::Erfinv>(args); }
absl::StatusOr<PreparedOp> PrepareNdtri(const NodeArgs& args) { return Special<sp::Ndtri>(args); }
absl::StatusOr<PreparedOp> PrepareErfcx(const NodeArgs& args) { return Special<sp::Erfcx>(args); }
absl::StatusOr<PreparedOp> PrepareI0(const NodeArgs& args) { return Special<sp::I0>(args); }
absl::StatusOr<PreparedOp> PrepareI0e(const NodeArgs& args) { return Special<sp::I0e>(args); }
absl::StatusOr<PreparedOp> PrepareI1(const NodeArgs& args) { return Special<sp::I1>(args); }
absl::StatusOr<PreparedOp> PrepareI1e(const NodeArgs& args) { return Special<sp::I1e>(args); }
absl::StatusOr<PreparedOp> PrepareBesselJ0(const NodeArgs& args) { return Special<sp::BesselJ0>(args); }
absl::StatusOr<PreparedOp> PrepareBesselJ1(const NodeArgs& args) { return Special<sp::BesselJ1>(args); }
absl::StatusOr<PreparedOp> PrepareBesselY0(const NodeArgs& args) { return Special<sp::BesselY0>(args); }
absl::StatusOr<PreparedOp> PrepareBesselY1(const NodeArgs& args) { return Special<sp::BesselY1>(args); }
absl::StatusOr<PreparedOp> PrepareModifiedBesselI0(const NodeArgs& args) {
  return Special<sp::ModifiedBesselI0>(args);
}
absl::StatusOr<PreparedOp> PrepareModifiedBesselI1(const NodeArgs& args) {
  return Special<sp::ModifiedBesselI1>(args);
}
absl::StatusOr<PreparedOp> PrepareModifiedBesselK0(const NodeArgs& args) {
  return Special<sp::ModifiedBesselK0>(args);
}
absl::StatusOr<PreparedOp> PrepareModifiedBesselK1(const NodeArgs& args) {
  return Special<sp::ModifiedBesselK1>(args);
}
absl::StatusOr<PreparedOp> PrepareScaledModifiedBesselK0(const NodeArgs& args) {
  return Special<sp::ScaledModifiedBesselK0>(args);
}
absl::StatusOr<PreparedOp> PrepareScaledModifiedBesselK1(const NodeArgs& args) {
  return Special<sp::ScaledModifiedBesselK1>(args);
}
absl::StatusOr<PreparedOp> PrepareSphericalBesselJ0(const NodeArgs& args) {
  return Special<sp::SphericalBesselJ0>(args);
}
absl::StatusOr<PreparedOp> PrepareAiryAi(const NodeArgs& args) { return Special<sp::AiryAi>(args, "x"); }

absl::StatusOr<PreparedOp> PreparePolygamma(const NodeArgs& args) {
  // (n: int, self)
  KILN_ASSIGN_OR_RETURN(int64_t n, args.Int(0, "n"));
  if (n < 0) return args.Error("polygamma is not defined for negative n");
  return Unary(
      args, [n](float x) { return static_cast<float>(sp::Polygamma(n, static_cast<double>(x))); },
      1, "self");
}

absl::StatusOr<PreparedOp> PrepareAngle(const NodeArgs& args) {
  // The argument of a real number: pi for negatives, 0 otherwise, NaN kept.
  return Unary(args, [](float x) {
    return x != x ? x : x < 0.f ? static_cast<float>(sp::detail::kPi) : 0.f;
  });
}

absl::StatusOr<PreparedOp> PrepareNextafter(const NodeArgs& args) {
  // (self, other): the next float after self towards other, in float.
  KILN_ASSIGN_OR_RETURN(Operand a, ReadOperand(args, 0, "self"));
  KILN_ASSIGN_OR_RETURN(Operand b, ReadOperand(args, 1, "other"));
  if (!a.is_tensor || !b.is_tensor || a.dtype != DType::kF32 || b.dtype != DType::kF32) {
    return args.Error("self and other must be f32 tensors");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, BroadcastOperands(args, {&a, &b}));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  op.kernel = MakeBinaryKernel<float, float>(a, b, shape, DType::kF32,
                                             [](float x, float y) { return std::nextafter(x, y); });
  return op;
}

absl::StatusOr<PreparedOp> PrepareZeta(const NodeArgs& args) { return Special2<sp::Zeta>(args, "self", "other"); }
absl::StatusOr<PreparedOp> PrepareIgamma(const NodeArgs& args) { return Special2<sp::Igamma>(args, "self", "other"); }
absl::StatusOr<PreparedOp> PrepareIgammac(const NodeArgs& args) {
  return Special2<sp::Igammac>(args, "self", "other");
}
absl::StatusOr<PreparedOp> PrepareChebyshevT(const NodeArgs& args) { return Special2<sp::ChebyshevT>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareChebyshevU(const NodeArgs& args) { return Special2<sp::ChebyshevU>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareChebyshevV(const NodeArgs& args) { return Special2<sp::ChebyshevV>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareChebyshevW(const NodeArgs& args) { return Special2<sp::ChebyshevW>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareShiftedChebyshevT(const NodeArgs& args) {
  return Special2<sp::ShiftedChebyshevT>(args, "x", "n");
}
absl::StatusOr<PreparedOp> PrepareShiftedChebyshevU(const NodeArgs& args) {
  return Special2<sp::ShiftedChebyshevU>(args, "x", "n");
}
absl::StatusOr<PreparedOp> PrepareShiftedChebyshevV(const NodeArgs& args) {
  return Special2<sp::ShiftedChebyshevV>(args, "x", "n");
}
absl::StatusOr<PreparedOp> PrepareShiftedChebyshevW(const NodeArgs& args) {
  return Special2<sp::ShiftedChebyshevW>(args, "x", "n");
}
absl::StatusOr<PreparedOp> PrepareHermiteH(const NodeArgs& args) { return Special2<sp::HermiteH>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareHermiteHe(const NodeArgs& args) { return Special2<sp::HermiteHe>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareLaguerreL(const NodeArgs& args) { return Special2<sp::LaguerreL>(args, "x", "n"); }
absl::StatusOr<PreparedOp> PrepareLegendreP(const NodeArgs& args) { return Special2<sp::LegendreP>(args, "x", "n"); }

}  // namespace kiln::runtime
