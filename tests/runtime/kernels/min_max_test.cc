// aten.maximum and aten.minimum (binary_math.cc) against references the
// test computes: broadcasting, f32 with NaN (a NaN operand gives NaN, as in
// ATen), i64, bool, and i64 with f32 promoting to f32.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

double RefMax(double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); }
double RefMin(double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::min(x, y); }

struct MinMaxCase {
  const char* op;
  double (*ref)(double, double);
};

void PrintTo(const MinMaxCase& c, std::ostream* os) { *os << c.op; }

class MinMaxTest : public ::testing::TestWithParam<MinMaxCase> {};

TEST_P(MinMaxTest, F32BroadcastsAndMatchesTheReference) {
  const MinMaxCase& c = GetParam();
  const auto x = RandomFloats(3 * 5, 1, -2, 2), y = RandomFloats(5, 2, -2, 2);
  OpTester t(c.op);
  t.AddArg(t.Input(F32({3, 5}), x));
  t.AddArg(t.Input(F32({5}), y));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3, 5}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) want.push_back(c.ref(x[i * 5 + j], y[j]));
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0)) << c.op;
}

TEST_P(MinMaxTest, ANaNOperandGivesNaN) {
  const MinMaxCase& c = GetParam();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t(c.op);
  t.AddArg(t.Input(F32({3}), {nan, 1.0f, 2.0f}));
  t.AddArg(t.Input(F32({3}), {0.0f, nan, -1.0f}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> out = t.OutputF32(0);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], static_cast<float>(c.ref(2.0, -1.0)));
}

TEST_P(MinMaxTest, I64AndBool) {
  const MinMaxCase& c = GetParam();
  {
    OpTester t(c.op);
    t.AddArg(I64Input(t, {4}, {-5, 0, 7, 3}));
    t.AddArg(I64Input(t, {1}, {2}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<int64_t> want;
    for (int64_t v : {-5, 0, 7, 3}) want.push_back(static_cast<int64_t>(c.ref(v, 2)));
    EXPECT_EQ(t.OutputI64(0), want);
  }
  {
    OpTester t(c.op);
    t.AddArg(BoolInput(t, {2, 1}, {1, 0}));
    t.AddArg(BoolInput(t, {1, 2}, {1, 0}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], Bool({2, 2}));
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    std::vector<int> want;
    for (int a : {1, 0}) {
      for (int b : {1, 0}) want.push_back(static_cast<int>(c.ref(a, b)));
    }
    EXPECT_EQ(out.Bools(0), want);
  }
}

TEST_P(MinMaxTest, I64WithF32PromotesToF32) {
  const MinMaxCase& c = GetParam();
  OpTester t(c.op);
  t.AddArg(I64Input(t, {3}, {-1, 0, 4}));
  t.AddArg(t.Input(F32({3}), {0.5f, -0.5f, 4.5f}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {c.ref(-1, 0.5), c.ref(0, -0.5), c.ref(4, 4.5)}, 0, 0));
}

TEST_P(MinMaxTest, ANumberIsNotATensor) {
  OpTester t(GetParam().op);
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(FloatArg(1.5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "other must be a tensor"));
}

INSTANTIATE_TEST_SUITE_P(Ops, MinMaxTest,
                         ::testing::Values(MinMaxCase{"aten.maximum.default", RefMax},
                                           MinMaxCase{"aten.minimum.default", RefMin}));

}  // namespace
}  // namespace kiln::runtime::testing
