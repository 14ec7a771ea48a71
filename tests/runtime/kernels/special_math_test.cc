// The special-function ops of special_math.cc, each run through the
// registry against a reference the test computes another way: the C++17
// special math functions (Bessel, Legendre, Hermite, Laguerre), closed
// forms (Chebyshev of x = cos t), inverse round trips, and sums in long
// double. The functions' own edge cases are in special_functions_test.cc.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

using LD = long double;

// Hurwitz zeta(s, q) = sum_k (k+q)^-s: 40 terms, then the Euler-Maclaurin tail.
double HurwitzRef(double s, double q) {
  LD sum = 0;
  const int n = 40;
  for (int k = 0; k < n; ++k) sum += std::pow(static_cast<LD>(k) + q, -static_cast<LD>(s));
  const LD a = static_cast<LD>(n) + q;
  sum += std::pow(a, 1 - static_cast<LD>(s)) / (s - 1) + std::pow(a, -static_cast<LD>(s)) / 2 +
         s * std::pow(a, -static_cast<LD>(s) - 1) / 12;
  return static_cast<double>(sum);
}

// Regularized lower incomplete gamma by its power series in long double.
double IgammaRef(double a, double x) {
  LD term = 1 / static_cast<LD>(a), sum = term;
  for (int k = 1; k < 500; ++k) {
    term *= static_cast<LD>(x) / (a + k);
    sum += term;
  }
  return static_cast<double>(sum * std::exp(-static_cast<LD>(x) + a * std::log(static_cast<LD>(x)) -
                                            std::lgamma(static_cast<LD>(a))));
}

double DigammaRef(double x) {  // central difference of lgamma in long double
  const LD h = 1e-5L;
  return static_cast<double>((std::lgamma(x + h) - std::lgamma(x - h)) / (2 * h));
}

double ChebRef(char kind, double x, double n) {  // x = cos t, |x| < 1
  const double t = std::acos(x);
  switch (kind) {
    case 't': return std::cos(n * t);
    case 'u': return std::sin((n + 1) * t) / std::sin(t);
    case 'v': return std::cos((n + 0.5) * t) / std::cos(t / 2);
    default: return std::sin((n + 0.5) * t) / std::sin(t / 2);
  }
}

struct UnaryCase {
  const char* op;
  std::function<double(double)> ref;
  float lo, hi;
};
void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.op; }

class SpecialUnaryTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(SpecialUnaryTest, MatchesAnIndependentReference) {
  const UnaryCase& c = GetParam();
  const auto x = RandomFloats(2 * 257, 31, c.lo, c.hi);
  OpTester t(c.op);
  t.AddArg(t.Input(F32({2, 257}), x));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 257}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (float v : x) want.push_back(c.ref(v));
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 2e-5, 1e-6)) << c.op;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, SpecialUnaryTest,
    ::testing::Values(
        UnaryCase{"aten.digamma.default", DigammaRef, 0.5, 20},
        UnaryCase{"aten.erfinv.default", [](double y) {
                    // erf(x) = y by bisection
                    double lo = -6, hi = 6;
                    for (int i = 0; i < 200; ++i) {
                      const double mid = (lo + hi) / 2;
                      (std::erf(mid) < y ? lo : hi) = mid;
                    }
                    return (lo + hi) / 2;
                  }, -0.99, 0.99},
        UnaryCase{"aten.special_ndtri.default", [](double p) {
                    double lo = -10, hi = 10;
                    for (int i = 0; i < 200; ++i) {
                      const double mid = (lo + hi) / 2;
                      (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
                    }
                    return (lo + hi) / 2;
                  }, 0.01, 0.99},
        UnaryCase{"aten.special_erfcx.default",
                  [](double x) { return static_cast<double>(std::exp(static_cast<LD>(x) * x) *
                                                            std::erfc(static_cast<LD>(x))); },
                  -3, 8},
        UnaryCase{"aten.i0.default", [](double x) { return std::cyl_bessel_i(0.0, std::fabs(x)); }, -20, 20},
        UnaryCase{"aten.special_i0e.default",
                  [](double x) { return std::cyl_bessel_i(0.0, std::fabs(x)) * std::exp(-std::fabs(x)); },
                  -30, 30},
        UnaryCase{"aten.special_i1.default",
                  [](double x) { return std::copysign(std::cyl_bessel_i(1.0, std::fabs(x)), x); }, -20, 20},
        UnaryCase{"aten.special_i1e.default",
                  [](double x) {
                    return std::copysign(std::cyl_bessel_i(1.0, std::fabs(x)), x) * std::exp(-std::fabs(x));
                  }, -30, 30},
        UnaryCase{"aten.special_modified_bessel_i0.default",
                  [](double x) { return std::cyl_bessel_i(0.0, std::fabs(x)); }, -15, 15},
        UnaryCase{"aten.special_modified_bessel_i1.default",
                  [](double x) { return std::copysign(std::cyl_bessel_i(1.0, std::fabs(x)), x); }, -15, 15},
        UnaryCase{"aten.special_modified_bessel_k0.default",
                  [](double x) { return std::cyl_bessel_k(0.0, x); }, 0.05, 30},
        UnaryCase{"aten.special_modified_bessel_k1.default",
                  [](double x) { return std::cyl_bessel_k(1.0, x); }, 0.05, 30},
        UnaryCase{"aten.special_scaled_modified_bessel_k0.default",
                  [](double x) { return std::cyl_bessel_k(0.0, x) * std::exp(x); }, 0.05, 60},
        UnaryCase{"aten.special_scaled_modified_bessel_k1.default",
                  [](double x) { return std::cyl_bessel_k(1.0, x) * std::exp(x); }, 0.05, 60},
        UnaryCase{"aten.special_bessel_j0.default",
                  [](double x) { return std::cyl_bessel_j(0.0, std::fabs(x)); }, -30, 30},
        UnaryCase{"aten.special_bessel_j1.default",
                  [](double x) { return (x < 0 ? -1 : 1) * std::cyl_bessel_j(1.0, std::fabs(x)); }, -30, 30},
        UnaryCase{"aten.special_bessel_y0.default", [](double x) { return std::cyl_neumann(0.0, x); }, 0.1, 30},
        UnaryCase{"aten.special_bessel_y1.default", [](double x) { return std::cyl_neumann(1.0, x); }, 0.1, 30},
        UnaryCase{"aten.special_spherical_bessel_j0.default",
                  [](double x) { return std::sph_bessel(0, std::fabs(x)); }, -30, 30},
        UnaryCase{"aten.special_airy_ai.default", [](double x) {
                    // Ai through Bessel functions of order 1/3 (DLMF 9.6.1, 9.6.6)
                    const double z = 2.0 / 3.0 * std::pow(std::fabs(x), 1.5);
                    if (x > 0) return std::sqrt(x / 3) * std::cyl_bessel_k(1.0 / 3, z) / M_PI;
                    const double j = std::cyl_bessel_j(1.0 / 3, z), y = std::cyl_neumann(1.0 / 3, z);
                    const double jm = std::cos(M_PI / 3) * j - std::sin(M_PI / 3) * y;
                    return std::sqrt(-x) / 3 * (j + jm);
                  }, -8, 6}));

struct BinaryCase {
  const char* op;
  const char *a_name, *b_name;
  std::function<double(double, double)> ref;
  float a_lo, a_hi, b_lo, b_hi;
  bool integer_b;  // b is a degree: whole numbers
};
void PrintTo(const BinaryCase& c, std::ostream* os) { *os << c.op; }

class SpecialBinaryTest : public ::testing::TestWithParam<BinaryCase> {};

TEST_P(SpecialBinaryTest, BroadcastsAndMatchesAnIndependentReference) {
  const BinaryCase& c = GetParam();
  auto a = RandomFloats(5, 41, c.a_lo, c.a_hi), b = RandomFloats(7, 42, c.b_lo, c.b_hi);
  if (c.integer_b) {
    for (float& v : b) v = std::round(v);
  }
  OpTester t(c.op);
  t.AddArg(t.Input(F32({5, 1}), a));
  t.AddArg(t.Input(F32({1, 7}), b));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({5, 7}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (float x : a) {
    for (float y : b) want.push_back(c.ref(x, y));
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 5e-5, 1e-6)) << c.op;
}

double Shifted(char kind, double x, double n) { return ChebRef(kind, 2 * x - 1, n); }

INSTANTIATE_TEST_SUITE_P(
    Ops, SpecialBinaryTest,
    ::testing::Values(
        BinaryCase{"aten.special_zeta.default", "self", "other", HurwitzRef, 1.5, 6, 0.5, 5, false},
        BinaryCase{"aten.igamma.default", "self", "other", IgammaRef, 0.5, 8, 0.1, 10, false},
        BinaryCase{"aten.igammac.default", "self", "other",
                   [](double a, double x) { return 1 - IgammaRef(a, x); }, 0.5, 8, 0.1, 3, false},
        BinaryCase{"aten.special_chebyshev_polynomial_t.default", "x", "n",
                   [](double x, double n) { return ChebRef('t', x, n); }, -0.95, 0.95, 0, 12, true},
        BinaryCase{"aten.special_chebyshev_polynomial_u.default", "x", "n",
                   [](double x, double n) { return ChebRef('u', x, n); }, -0.95, 0.95, 0, 12, true},
        BinaryCase{"aten.special_chebyshev_polynomial_v.default", "x", "n",
                   [](double x, double n) { return ChebRef('v', x, n); }, -0.95, 0.95, 0, 12, true},
        BinaryCase{"aten.special_chebyshev_polynomial_w.default", "x", "n",
                   [](double x, double n) { return ChebRef('w', x, n); }, -0.95, 0.95, 0, 12, true},
        BinaryCase{"aten.special_shifted_chebyshev_polynomial_t.default", "x", "n",
                   [](double x, double n) { return Shifted('t', x, n); }, 0.03, 0.97, 0, 12, true},
        BinaryCase{"aten.special_shifted_chebyshev_polynomial_u.default", "x", "n",
                   [](double x, double n) { return Shifted('u', x, n); }, 0.03, 0.97, 0, 12, true},
        BinaryCase{"aten.special_shifted_chebyshev_polynomial_v.default", "x", "n",
                   [](double x, double n) { return Shifted('v', x, n); }, 0.03, 0.97, 0, 12, true},
        BinaryCase{"aten.special_shifted_chebyshev_polynomial_w.default", "x", "n",
                   [](double x, double n) { return Shifted('w', x, n); }, 0.03, 0.97, 0, 12, true},
        BinaryCase{"aten.special_hermite_polynomial_h.default", "x", "n",
                   [](double x, double n) { return std::hermite(static_cast<unsigned>(n), x); },
                   -3, 3, 0, 10, true},
        BinaryCase{"aten.special_hermite_polynomial_he.default", "x", "n",
                   [](double x, double n) {  // He_n(x) = 2^(-n/2) H_n(x / sqrt 2)
                     return std::pow(2.0, -n / 2) * std::hermite(static_cast<unsigned>(n), x / std::sqrt(2.0));
                   }, -3, 3, 0, 10, true},
        BinaryCase{"aten.special_laguerre_polynomial_l.default", "x", "n",
                   [](double x, double n) { return std::laguerre(static_cast<unsigned>(n), x); },
                   0, 4, 0, 10, true},
        BinaryCase{"aten.special_legendre_polynomial_p.default", "x", "n",
                   [](double x, double n) { return std::legendre(static_cast<unsigned>(n), x); },
                   -1, 1, 0, 12, true}));

TEST(SpecialMathTest, PolygammaTakesItsOrderAsAnInt) {
  const auto x = RandomFloats(64, 51, 0.5, 10);
  for (int64_t n : {1, 2, 3}) {
    OpTester t("aten.polygamma.default");
    t.AddArg(IntArg(n));
    t.AddArg(t.Input(F32({64}), x));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> want;
    for (float v : x) {  // (-1)^(n+1) n! zeta(n+1, x)
      want.push_back((n % 2 ? 1 : -1) * std::tgamma(n + 1.0) * HurwitzRef(n + 1.0, v));
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 5e-5, 1e-6)) << n;
  }
  OpTester bad("aten.polygamma.default");
  bad.AddArg(IntArg(-1));
  bad.AddArg(bad.Input(F32({4}), {1, 2, 3, 4}));
  EXPECT_EQ(bad.Prepare().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpecialMathTest, AngleAndNextafterOfRealNumbers) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester a("aten.angle.default");
  a.AddArg(a.Input(F32({4}), {-2.f, 0.f, 3.f, nan}));
  ASSERT_TRUE(a.Prepare().ok()) << a.Prepare();
  ASSERT_TRUE(a.Run().ok());
  EXPECT_TRUE(AllClose(a.OutputF32(0), {M_PI, 0, 0, std::nan("")}, 1e-7, 0));

  const std::vector<float> x = {1.f, 1.f, -0.f, 5.f}, y = {2.f, 0.f, 1.f, 5.f};
  OpTester n("aten.nextafter.default");
  n.AddArg(n.Input(F32({4}), x));
  n.AddArg(n.Input(F32({4}), y));
  ASSERT_TRUE(n.Prepare().ok()) << n.Prepare();
  ASSERT_TRUE(n.Run().ok());
  std::vector<double> want;  // one float step: 1 + 2^-23, 1 - 2^-24, the smallest denormal
  for (double v : {1.0 + std::ldexp(1.0, -23), 1.0 - std::ldexp(1.0, -24), std::ldexp(1.0, -149),
                   5.0}) {
    want.push_back(v);
  }
  EXPECT_TRUE(AllClose(n.OutputF32(0), want, 0, 0));
}

}  // namespace
}  // namespace kiln::runtime::testing
