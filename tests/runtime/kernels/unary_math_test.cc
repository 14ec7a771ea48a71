// Tests the f32 elementwise math of unary_math.cc against double-precision
// references.
#include <cmath>
#include <functional>

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
        UnaryCase{"aten.tanh.default", [](double x) { return std::tanh(x); }, -6, 6}));

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
  OpTester t("aten.neg.default");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
