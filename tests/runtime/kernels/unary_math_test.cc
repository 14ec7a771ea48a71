// Tests the elementwise math of unary_math.cc against double-precision
// references (f32), and exactly for i64 and rounding.
#include <cmath>
#include <functional>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct UnaryCase {
  const char* op;
  std::function<double(double)> ref;
  float lo, hi;
};

void PrintTo(const UnaryCase& c, std::ostream* os) { *os << c.op; }

class UnaryMathTest : public ::testing::TestWithParam<UnaryCase> {};

TEST_P(UnaryMathTest, MatchesDoubleReference) {
  const UnaryCase& c = GetParam();
  const auto x = RandomFloats(3 * 1007, 11, c.lo, c.hi);
  OpTester t(c.op);
  t.AddArg(t.Input(F32({3, 1007}), x));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3, 1007}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (float v : x) want.push_back(c.ref(v));
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 2e-6, 1e-7)) << c.op;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, UnaryMathTest,
    ::testing::Values(
        UnaryCase{"aten.neg.default", [](double x) { return -x; }, -5, 5},
        UnaryCase{"aten.abs.default", [](double x) { return std::fabs(x); }, -5, 5},
        UnaryCase{"aten.log.default", [](double x) { return std::log(x); }, 1e-3, 100},
        UnaryCase{"aten.exp.default", [](double x) { return std::exp(x); }, -10, 10},
        UnaryCase{"aten.sqrt.default", [](double x) { return std::sqrt(x); }, 0, 100},
        UnaryCase{"aten.rsqrt.default", [](double x) { return 1 / std::sqrt(x); }, 1e-3, 100},
        // Timestep embeddings take sin/cos of arguments up to ~1000.
        UnaryCase{"aten.sin.default", [](double x) { return std::sin(x); }, -1000, 1000},
        UnaryCase{"aten.cos.default", [](double x) { return std::cos(x); }, -1000, 1000},
        UnaryCase{"aten.tanh.default", [](double x) { return std::tanh(x); }, -6, 6},
        UnaryCase{"aten.reciprocal.default", [](double x) { return 1 / x; }, 0.01, 50},
        UnaryCase{"aten.expm1.default", [](double x) { return std::expm1(x); }, -5, 5},
        UnaryCase{"aten.exp2.default", [](double x) { return std::exp2(x); }, -20, 20},
        UnaryCase{"aten.log1p.default", [](double x) { return std::log1p(x); }, -0.99, 50},
        UnaryCase{"aten.log2.default", [](double x) { return std::log2(x); }, 1e-3, 100},
        UnaryCase{"aten.log10.default", [](double x) { return std::log10(x); }, 1e-3, 100},
        UnaryCase{"aten.tan.default", [](double x) { return std::tan(x); }, -1.5, 1.5},
        UnaryCase{"aten.asin.default", [](double x) { return std::asin(x); }, -1, 1},
        UnaryCase{"aten.acos.default", [](double x) { return std::acos(x); }, -1, 1},
        UnaryCase{"aten.atan.default", [](double x) { return std::atan(x); }, -20, 20},
        UnaryCase{"aten.sinh.default", [](double x) { return std::sinh(x); }, -8, 8},
        UnaryCase{"aten.cosh.default", [](double x) { return std::cosh(x); }, -8, 8},
        UnaryCase{"aten.asinh.default", [](double x) { return std::asinh(x); }, -50, 50},
        UnaryCase{"aten.acosh.default", [](double x) { return std::acosh(x); }, 1, 50},
        UnaryCase{"aten.atanh.default", [](double x) { return std::atanh(x); }, -0.99, 0.99},
        UnaryCase{"aten.erf.default", [](double x) { return std::erf(x); }, -4, 4},
        UnaryCase{"aten.erfc.default", [](double x) { return std::erfc(x); }, -4, 4},
        UnaryCase{"aten.lgamma.default", [](double x) { return std::lgamma(x); }, 3, 30},
        UnaryCase{"aten.floor.default", [](double x) { return std::floor(x); }, -50, 50},
        UnaryCase{"aten.ceil.default", [](double x) { return std::ceil(x); }, -50, 50},
        UnaryCase{"aten.trunc.default", [](double x) { return std::trunc(x); }, -50, 50},
        UnaryCase{"aten.sign.default", [](double x) { return (x > 0) - (x < 0); }, -5, 5}));

// Halves round to even; NaN and signed zero pass through.
TEST(UnaryMathTest, RoundHalvesToEven) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.round.default");
  t.AddArg(t.Input(F32({7}), {0.5f, 1.5f, 2.5f, -2.5f, -0.4f, 7.6f, nan}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> out = t.OutputF32(0);
  EXPECT_TRUE(AllClose({out.begin(), out.end() - 1}, {0, 2, 2, -2, 0, 8}, 0, 0));
  EXPECT_TRUE(std::signbit(out[4]));
  EXPECT_TRUE(std::isnan(out[6]));
}

TEST(UnaryMathTest, RoundToDecimals) {
  OpTester t("aten.round.decimals");
  t.AddArg(t.Input(F32({3}), {1.2345f, -2.5f, 0.125f}));
  t.AddKwarg("decimals", IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1.23, -2.5, 0.12}, 1e-6, 0));
  OpTester n("aten.round.decimals");
  n.AddArg(n.Input(F32({3}), {1250, 1350, -1.5f}));
  n.AddKwarg("decimals", IntArg(-2));
  ASSERT_TRUE(n.Prepare().ok()) << n.Prepare();
  ASSERT_TRUE(n.Run().ok());
  EXPECT_TRUE(AllClose(n.OutputF32(0), {1200, 1400, 0}, 0, 0));
}

TEST(UnaryMathTest, SignOfNaNIsZero) {
  OpTester t("aten.sign.default");
  t.AddArg(t.Input(F32({1}), {std::numeric_limits<float>::quiet_NaN()}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputF32(0)[0], 0.0f);
}

// neg, abs and sign of i64, with two's complement at the edge as in ATen.
TEST(UnaryMathTest, IntegerNegAbsSign) {
  const int64_t lo = std::numeric_limits<int64_t>::min();
  const std::vector<int64_t> x = {-7, 0, 5, lo, 123456789012345};
  struct Case {
    const char* op;
    std::vector<int64_t> want;
  };
  for (const Case& c : {Case{"aten.neg.default", {7, 0, -5, lo, -123456789012345}},
                        Case{"aten.abs.default", {7, 0, 5, lo, 123456789012345}},
                        Case{"aten.sign.default", {-1, 0, 1, -1, 1}}}) {
    OpTester t(c.op);
    t.AddArg(I64Input(t, {5}, x));
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], I64({5}));
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputI64(0), c.want) << c.op;
  }
}

class PowTest : public ::testing::TestWithParam<double> {};

TEST_P(PowTest, MatchesDoubleReference) {
  const double e = GetParam();
  const auto x = RandomFloats(513, 3, 0.1f, 4.0f);
  OpTester t("aten.pow.Tensor_Scalar");
  t.AddArg(t.Input(F32({513}), x));
  t.AddArg(e == std::floor(e) ? IntArg(static_cast<int64_t>(e)) : FloatArg(e));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (float v : x) want.push_back(std::pow(static_cast<double>(v), e));
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 3e-6, 0)) << e;
}

INSTANTIATE_TEST_SUITE_P(Exponents, PowTest,
                         ::testing::Values(2.0, 3.0, 1.0, 0.5, -0.5, -1.0, -2.0,
                                           1.7, 0.0));

TEST(UnaryMathTest, RejectsNonF32Input) {
  OpTester t("aten.exp.default");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
