// Tests the vectorized f32 math (runtime/kernels/vector_math.h) against
// double-precision references: a sweep over the whole float range by bit
// pattern, a dense sweep of [-20, 20], the points where each function
// switches formula or overflows, and special values (NaN, infinities,
// signed zeros, subnormals). Also: a value's result does not depend on its
// position in an array (tails use the same code), and the softmax helpers.
#include "runtime/kernels/vector_math.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::runtime::vmath {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Sigmoid in double without overflow in either tail.
double SigmoidRef(double x) {
  return x >= 0 ? 1.0 / (1.0 + std::exp(-x)) : std::exp(x) / (1.0 + std::exp(x));
}

double GeluErfRef(double x) {
  // erfc keeps the negative tail exact where 1 + erf would cancel.
  return x < 0 ? 0.5 * x * std::erfc(-x * M_SQRT1_2) : 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
}

double GeluTanhRef(double x) {
  // ATen's float constants; 1 + tanh(u) = 2 sigmoid(2u).
  const double beta = static_cast<double>(0.79788456080286535588f);
  const double kappa = static_cast<double>(0.044715f);
  return x * SigmoidRef(2.0 * beta * (x + kappa * x * x * x));
}

struct MathCase {
  std::string name;
  __m256 (*fn)(__m256);
  double (*ref)(double);
};

void PrintTo(const MathCase& c, std::ostream* os) { *os << c.name; }

std::vector<MathCase> Cases() {
  return {
      {"exp", [](__m256 v) { return Exp(v); }, [](double x) { return std::exp(x); }},
      {"sigmoid", [](__m256 v) { return Sigmoid(v); }, SigmoidRef},
      {"tanh", [](__m256 v) { return Tanh(v); }, [](double x) { return std::tanh(x); }},
      {"erf", [](__m256 v) { return Erf(v); }, [](double x) { return std::erf(x); }},
      {"gelu_erf", [](__m256 v) { return GeluErf(v); }, GeluErfRef},
      {"gelu_tanh", [](__m256 v) { return GeluTanh(v); }, GeluTanhRef},
      {"silu", [](__m256 v) { return Silu(v); }, [](double x) { return x * SigmoidRef(x); }},
  };
}

std::vector<float> Apply(const MathCase& c, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  Map(x.data(), y.data(), static_cast<int64_t>(x.size()), c.fn);
  return y;
}

// Relative error at most 2e-6 where the exact result is a normal float;
// within 4 subnormal steps (4 * 2^-149) below that; the same infinity where
// it overflows; NaN exactly where the reference is NaN.
::testing::AssertionResult Accurate(const MathCase& c, const std::vector<float>& x) {
  const std::vector<float> y = Apply(c, x);
  int bad = 0;
  double worst = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t i = 0; i < x.size(); ++i) {
    const double r = c.ref(x[i]);
    const double v = y[i];
    bool ok;
    if (std::isnan(r)) {
      ok = std::isnan(v);
    } else if (std::abs(r) > FLT_MAX) {
      // Overflow: only values that round to infinity must be infinite.
      ok = std::isinf(v) ? (v > 0) == (r > 0) : std::abs(r) < 0x1.ffffffp127;
    } else if (std::abs(r) >= FLT_MIN) {
      const double rel = std::abs(v - r) / std::abs(r);
      worst = std::max(worst, rel);
      ok = rel <= 2e-6;
    } else {
      ok = std::abs(v - r) <= 4 * 0x1p-149;
    }
    if (!ok) {
      if (bad == 0) result = ::testing::AssertionFailure() << c.name << ":\n";
      if (bad < 5) {
        result << "  x = " << std::hexfloat << x[i] << std::defaultfloat << " (" << x[i]
               << "): got " << v << ", expected " << r << "\n";
      }
      ++bad;
    }
  }
  if (bad > 0) result << bad << " of " << x.size() << " values off";
  return result << " (worst relative error " << worst << ")";
}

class VectorMathTest : public ::testing::TestWithParam<MathCase> {};

TEST_P(VectorMathTest, AccurateOverTheWholeFloatRange) {
  // Every 4099th bit pattern: about a million floats of both signs and
  // every exponent, subnormals, infinities and NaNs included.
  std::vector<float> x;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) {
    const uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, sizeof f);
    x.push_back(f);
  }
  EXPECT_TRUE(Accurate(GetParam(), x));
}

TEST_P(VectorMathTest, AccurateOnADenseSweepOfTheInterestingRange) {
  std::vector<float> x;
  for (int i = -1000000; i <= 1000000; ++i) x.push_back(static_cast<float>(i) * 2e-5f);
  EXPECT_TRUE(Accurate(GetParam(), x));
}

TEST_P(VectorMathTest, AccurateAroundFormulaSwitchesAndRangeLimits) {
  // Thresholds of every function (tanh 0.625, erf 1, gelu |x|/sqrt2 = 0.5,
  // 1, exp overflow / normal / subnormal limits, the 11 where erfc's
  // polynomial is held) and 64 neighbours on each side of each.
  const float points[] = {0.625f, 1.0f,        0.70710678f, 1.41421356f, 88.7228394f,
                          -87.3365448f, -103.972084f, 11.0f, 15.5563492f, 44.3614197f,
                          -13.2f, -10.1f, 0.5f, 2.0f, 1e-20f, 1e-38f};
  std::vector<float> x;
  for (float p : points) {
    for (float s : {p, -p}) {
      float up = s, down = s;
      for (int i = 0; i < 64; ++i) {
        x.push_back(up);
        x.push_back(down);
        up = std::nextafter(up, kInf);
        down = std::nextafter(down, -kInf);
      }
    }
  }
  EXPECT_TRUE(Accurate(GetParam(), x));
}

TEST_P(VectorMathTest, HandlesSpecialValues) {
  const std::vector<float> x = {kNaN,    -kNaN,    kInf,   -kInf,    0.0f,     -0.0f,
                                FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN, 0x1p-149f, -0x1p-149f,
                                1e30f,   -1e30f,   1e10f,   -1e10f,   200.0f,   -200.0f};
  EXPECT_TRUE(Accurate(GetParam(), x));
  const std::vector<float> y = Apply(GetParam(), x);
  // Odd functions keep the sign of zero.
  const std::string& name = GetParam().name;
  if (name != "exp" && name != "sigmoid") {
    EXPECT_TRUE(std::signbit(y[5])) << name << "(-0) = " << y[5];
    EXPECT_FALSE(std::signbit(y[4])) << name << "(+0) = " << y[4];
  }
}

INSTANTIATE_TEST_SUITE_P(All, VectorMathTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<MathCase>& info) {
                           return info.param.name;
                         });

// The same 13 values at every offset of arrays of 1..40 elements: the
// masked tail must give the bits the 8-wide body gives. `f` is a lambda so
// Map inlines it, as the kernels do.
template <typename F>
void ExpectPositionIndependent(const char* name, F f) {
  const std::vector<float> values = {-90.5f, -12.0f, -3.3f, -0.7f, -0.0f, 0.3f, 0.625f,
                                     0.99f,  1.7f,   5.0f,  20.0f, 95.0f, 1e-30f};
  for (float v : values) {
    const float want = Scalar(v, f);
    for (int n = 1; n <= 40; ++n) {
      for (int at = 0; at < n; ++at) {
        std::vector<float> x(n, 0.5f), y(n);
        x[at] = v;
        Map(x.data(), y.data(), n, f);
        ASSERT_EQ(std::memcmp(&y[at], &want, sizeof want), 0)
            << name << "(" << v << ") at " << at << " of " << n;
      }
    }
  }
}

TEST(VectorMath, ResultDoesNotDependOnPositionInTheArray) {
  ExpectPositionIndependent("exp", [](__m256 v) { return Exp(v); });
  ExpectPositionIndependent("sigmoid", [](__m256 v) { return Sigmoid(v); });
  ExpectPositionIndependent("tanh", [](__m256 v) { return Tanh(v); });
  ExpectPositionIndependent("erf", [](__m256 v) { return Erf(v); });
  ExpectPositionIndependent("gelu_erf", [](__m256 v) { return GeluErf(v); });
  ExpectPositionIndependent("gelu_tanh", [](__m256 v) { return GeluTanh(v); });
  ExpectPositionIndependent("silu", [](__m256 v) { return Silu(v); });
}

TEST(VectorMath, ExpSaturatesAndUnderflowsExactly) {
  EXPECT_EQ(Scalar(-kInf, [](__m256 v) { return Exp(v); }), 0.0f);
  EXPECT_EQ(Scalar(-104.0f, [](__m256 v) { return Exp(v); }), 0.0f);
  EXPECT_EQ(Scalar(89.0f, [](__m256 v) { return Exp(v); }), kInf);
  EXPECT_EQ(Scalar(0.0f, [](__m256 v) { return Exp(v); }), 1.0f);
  // exp(88.72) is just below FLT_MAX: finite, not inf.
  EXPECT_TRUE(std::isfinite(Scalar(88.72f, [](__m256 v) { return Exp(v); })));
  // The scaled form's own clamp point also rounds to exactly 0.
  EXPECT_EQ(Scalar(-kInf, [](__m256 v) { return ExpScaled(v, kTailScaleLog2); }), 0.0f);
}

TEST(VectorMath, SaturatingFunctionsReachTheirLimitsExactly) {
  EXPECT_EQ(Scalar(kInf, [](__m256 v) { return Sigmoid(v); }), 1.0f);
  EXPECT_EQ(Scalar(-kInf, [](__m256 v) { return Sigmoid(v); }), 0.0f);
  EXPECT_EQ(Scalar(20.0f, [](__m256 v) { return Tanh(v); }), 1.0f);
  EXPECT_EQ(Scalar(-kInf, [](__m256 v) { return Tanh(v); }), -1.0f);
  EXPECT_EQ(Scalar(5.0f, [](__m256 v) { return Erf(v); }), 1.0f);
  EXPECT_EQ(Scalar(-kInf, [](__m256 v) { return Erf(v); }), -1.0f);
  EXPECT_EQ(Scalar(kInf, [](__m256 v) { return GeluErf(v); }), kInf);
  EXPECT_EQ(Scalar(kInf, [](__m256 v) { return GeluTanh(v); }), kInf);
  EXPECT_EQ(Scalar(kInf, [](__m256 v) { return Silu(v); }), kInf);
  EXPECT_EQ(Scalar(1e20f, [](__m256 v) { return GeluTanh(v); }), 1e20f);
}

TEST(VectorMath, GeluAndSiluOfMinusInfinityAreNaNAsInATen) {
  EXPECT_TRUE(std::isnan(Scalar(-kInf, [](__m256 v) { return GeluErf(v); })));
  EXPECT_TRUE(std::isnan(Scalar(-kInf, [](__m256 v) { return GeluTanh(v); })));
  EXPECT_TRUE(std::isnan(Scalar(-kInf, [](__m256 v) { return Silu(v); })));
  // Finite but hugely negative: exactly -0.
  const float g = Scalar(-1e30f, [](__m256 v) { return GeluErf(v); });
  EXPECT_TRUE(g == 0.0f && std::signbit(g)) << g;
  const float s = Scalar(-1e30f, [](__m256 v) { return Silu(v); });
  EXPECT_TRUE(s == 0.0f && std::signbit(s)) << s;
}

TEST(VectorMath, ExpShiftedIsAccurateFromMinus80Up) {
  // Every 1031st float of [-80, 88] (about two million).
  int bad = 0;
  double worst = 0;
  for (float lo : {-80.0f, 0.0f}) {
    const float hi = lo < 0 ? -0.0f : 88.0f;
    uint32_t a, b;
    std::memcpy(&a, lo < 0 ? &hi : &lo, 4);
    std::memcpy(&b, lo < 0 ? &lo : &hi, 4);
    for (uint32_t bits = a; bits <= b; bits += 1031) {
      float x;
      std::memcpy(&x, &bits, 4);
      const double r = std::exp(static_cast<double>(x));
      const double rel = std::abs(Scalar(x, [](__m256 v) { return ExpShifted(v); }) - r) / r;
      worst = std::max(worst, rel);
      if (rel > 2e-7) ++bad;
    }
  }
  EXPECT_EQ(bad, 0) << "worst relative error " << worst;
}

TEST(VectorMath, ExpShiftedIsZeroBelowMinus80AndKeepsNaN) {
  const auto f = [](float x) { return Scalar(x, [](__m256 v) { return ExpShifted(v); }); };
  EXPECT_EQ(f(-kInf), 0.0f);
  EXPECT_EQ(f(-80.001f), 0.0f);
  EXPECT_EQ(f(-1e30f), 0.0f);
  EXPECT_GT(f(-80.0f), 0.0f);
  EXPECT_EQ(f(0.0f), 1.0f);
  EXPECT_EQ(f(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(f(kNaN)));
}

TEST(VectorMath, ExpShiftedSumMatchesScalarLoop) {
  for (int n : {1, 7, 8, 9, 31, 100}) {
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = 0.37f * static_cast<float>(i % 13) - 2.0f;
    const float sum = ExpShiftedSum(x.data(), 1.5f, y.data(), n);
    double ref_sum = 0;
    for (int i = 0; i < n; ++i) {
      const double r = std::exp(static_cast<double>(x[i]) - 1.5);
      EXPECT_NEAR(y[i], r, 2e-6 * r) << i;
      ref_sum += r;
    }
    EXPECT_NEAR(sum, ref_sum, 1e-6 * ref_sum) << n;
  }
}

TEST(VectorMath, MaxSkipsNaNLikeAStdMaxLoop) {
  for (int n : {1, 5, 8, 13, 24}) {
    std::vector<float> x(n);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>((i * 7) % 11) - 5.0f;
    float want = -kInf;
    for (float v : x) want = std::max(want, v);
    EXPECT_EQ(Max(x.data(), n), want) << n;
    x[n / 2] = kNaN;
    want = -kInf;
    for (float v : x) want = std::max(want, v);
    EXPECT_EQ(Max(x.data(), n), want) << n;
  }
  const float all_neg_inf[3] = {-kInf, -kInf, -kInf};
  EXPECT_EQ(Max(all_neg_inf, 3), -kInf);
}

}  // namespace
}  // namespace kiln::runtime::vmath
