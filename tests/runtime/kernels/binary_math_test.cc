// The arithmetic of binary_math.cc beyond add/sub/maximum/minimum (those
// are in typed_elementwise_test.cc and min_max_test.cc): each op against
// a reference the test computes, for f32 with broadcasting and for i64
// and bool where ATen defines the op, with ATen's rounding and sign rules.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct FloatCase {
  const char* op;
  double (*ref)(double, double);
  float lo, hi;  // operand range (the divisor's magnitude at least 0.25)
};

void PrintTo(const FloatCase& c, std::ostream* os) { *os << c.op; }

double FloorDiv(double a, double b) { return std::floor(a / b); }
double TruncDiv(double a, double b) { return std::trunc(a / b); }
double Remainder(double a, double b) { return a - b * std::floor(a / b); }

class FloatBinaryTest : public ::testing::TestWithParam<FloatCase> {};

TEST_P(FloatBinaryTest, BroadcastsAndMatchesTheReference) {
  const FloatCase& c = GetParam();
  auto x = RandomFloats(4 * 6, 21, c.lo, c.hi), y = RandomFloats(6, 22, c.lo, c.hi);
  for (float& v : y) v = std::copysign(std::max(std::fabs(v), 0.25f), v);
  OpTester t(c.op);
  t.AddArg(t.Input(F32({4, 6}), x));
  t.AddArg(t.Input(F32({6}), y));
  if (std::string(c.op) == "aten.div.Tensor_mode") {
    t.AddKwarg("rounding_mode", StringArg(c.ref == FloorDiv ? "floor" : "trunc"));
  }
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({4, 6}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) want.push_back(c.ref(x[i * 6 + j], y[j]));
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 2e-6, 1e-6)) << c.op;
}

INSTANTIATE_TEST_SUITE_P(
    Ops, FloatBinaryTest,
    ::testing::Values(
        FloatCase{"aten.div.Tensor_mode", FloorDiv, -20, 20},
        FloatCase{"aten.div.Tensor_mode", TruncDiv, -20, 20},
        FloatCase{"aten.remainder.Tensor", Remainder, -20, 20},
        FloatCase{"aten.fmod.Tensor", [](double a, double b) { return std::fmod(a, b); }, -20, 20},
        FloatCase{"aten.pow.Tensor_Tensor", [](double a, double b) { return std::pow(a, b); },
                  0.25, 3},
        FloatCase{"aten.atan2.default", [](double a, double b) { return std::atan2(a, b); }, -5, 5},
        FloatCase{"aten.hypot.default", [](double a, double b) { return std::hypot(a, b); }, -5, 5},
        FloatCase{"aten.copysign.Tensor",
                  [](double a, double b) { return std::copysign(a, b); }, -5, 5},
        FloatCase{"aten.fmax.default", [](double a, double b) { return std::max(a, b); }, -5, 5},
        FloatCase{"aten.fmin.default", [](double a, double b) { return std::min(a, b); }, -5, 5}));

// Integer forms: Python's floor division and modulo signs, C's fmod,
// powers by squaring with ATen's negative exponents.
TEST(BinaryMathTest, IntegerDivisionRemainderFmodPow) {
  const std::vector<int64_t> a = {-7, 7, -7, 7, 2, -1, 3, 1};
  const std::vector<int64_t> b = {3, -3, -3, 3, 10, -3, -1, -5};
  struct Case {
    const char* op;
    const char* mode;
    std::vector<int64_t> want;
  };
  for (const Case& c : {Case{"aten.div.Tensor_mode", "floor", {-3, -3, 2, 2, 0, 0, -3, -1}},
                        Case{"aten.div.Tensor_mode", "trunc", {-2, -2, 2, 2, 0, 0, -3, 0}},
                        Case{"aten.remainder.Tensor", nullptr, {2, -2, -1, 1, 2, -1, 0, -4}},
                        Case{"aten.fmod.Tensor", nullptr, {-1, 1, -1, 1, 2, -1, 0, 1}},
                        Case{"aten.pow.Tensor_Tensor", nullptr, {-343, 0, 0, 343, 1024, -1, 0, 1}}}) {
    OpTester t(c.op);
    t.AddArg(I64Input(t, {8}, a));
    t.AddArg(I64Input(t, {8}, b));
    if (c.mode != nullptr) t.AddKwarg("rounding_mode", StringArg(c.mode));
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], I64({8})) << c.op;
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputI64(0), c.want) << c.op << " " << (c.mode ? c.mode : "");
  }
}

// True division and mul of integers: promotion to f32 and i64.
TEST(BinaryMathTest, IntegerMulAndTrueDivision) {
  OpTester m("aten.mul.Tensor");
  m.AddArg(I64Input(m, {3}, {3, -4, 5}));
  m.AddArg(BoolInput(m, {3}, {1, 0, 1}));
  ASSERT_TRUE(m.Prepare().ok()) << m.Prepare();
  EXPECT_EQ(m.output_metas()[0], I64({3}));
  ASSERT_TRUE(m.Run().ok());
  EXPECT_EQ(m.OutputI64(0), (std::vector<int64_t>{3, 0, 5}));

  OpTester d("aten.div.Tensor");
  d.AddArg(I64Input(d, {3}, {7, -1, 4}));
  d.AddArg(IntArg(2));
  ASSERT_TRUE(d.Prepare().ok()) << d.Prepare();
  EXPECT_EQ(d.output_metas()[0], F32({3}));
  ASSERT_TRUE(d.Run().ok());
  EXPECT_TRUE(AllClose(d.OutputF32(0), {3.5, -0.5, 2}, 0, 0));
}

// A number base with a tensor exponent (pow.Scalar), f32 and i64.
TEST(BinaryMathTest, PowOfANumber) {
  OpTester t("aten.pow.Scalar");
  t.AddArg(FloatArg(2.5));
  t.AddArg(t.Input(F32({3}), {0, 1, -2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1, 2.5, 0.16}, 1e-6, 0));
}

// remainder and fmod with a number divisor, and the other bitwise forms.
TEST(BinaryMathTest, ScalarDivisorsAndBitwiseForms) {
  OpTester r("aten.remainder.Scalar");
  r.AddArg(r.Input(F32({4}), {-7, 7, 5.5f, -0.5f}));
  r.AddArg(FloatArg(-3));
  ASSERT_TRUE(r.Prepare().ok()) << r.Prepare();
  ASSERT_TRUE(r.Run().ok());
  EXPECT_TRUE(AllClose(r.OutputF32(0), {-1, -2, -0.5, -0.5}, 0, 0));

  OpTester f("aten.fmod.Scalar");
  f.AddArg(I64Input(f, {3}, {-7, 7, 9}));
  f.AddArg(IntArg(4));
  ASSERT_TRUE(f.Prepare().ok()) << f.Prepare();
  ASSERT_TRUE(f.Run().ok());
  EXPECT_EQ(f.OutputI64(0), (std::vector<int64_t>{-3, 3, 1}));

  OpTester o("aten.bitwise_or.Scalar");
  o.AddArg(I64Input(o, {2}, {8, 1}));
  o.AddArg(IntArg(3));
  ASSERT_TRUE(o.Prepare().ok()) << o.Prepare();
  ASSERT_TRUE(o.Run().ok());
  EXPECT_EQ(o.OutputI64(0), (std::vector<int64_t>{11, 3}));

  OpTester x("aten.bitwise_xor.Tensor");
  x.AddArg(I64Input(x, {2, 2}, {6, 5, 0, -1}));
  x.AddArg(I64Input(x, {2}, {3, 5}));
  ASSERT_TRUE(x.Prepare().ok()) << x.Prepare();
  ASSERT_TRUE(x.Run().ok());
  EXPECT_EQ(x.OutputI64(0), (std::vector<int64_t>{5, 0, 3, -6}));
}

TEST(BinaryMathTest, FmaxAndFminIgnoreNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.fmax.default");
  t.AddArg(t.Input(F32({3}), {nan, 1, nan}));
  t.AddArg(t.Input(F32({3}), {2, nan, nan}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> out = t.OutputF32(0);
  EXPECT_EQ(out[0], 2.f);
  EXPECT_EQ(out[1], 1.f);
  EXPECT_TRUE(std::isnan(out[2]));
}

TEST(BinaryMathTest, BitwiseOrXorNot) {
  OpTester o("aten.bitwise_or.Tensor");
  o.AddArg(I64Input(o, {3}, {0b1100, 5, -8}));
  o.AddArg(I64Input(o, {3}, {0b1010, 0, 3}));
  ASSERT_TRUE(o.Prepare().ok()) << o.Prepare();
  ASSERT_TRUE(o.Run().ok());
  EXPECT_EQ(o.OutputI64(0), (std::vector<int64_t>{0b1110, 5, -5}));

  OpTester x("aten.bitwise_xor.Scalar");
  x.AddArg(BoolInput(x, {2}, {1, 0}));
  x.AddArg(BoolArg(true));
  ASSERT_TRUE(x.Prepare().ok()) << x.Prepare();
  ASSERT_TRUE(x.Run().ok());
  EXPECT_EQ(x.OutputBool(0), (std::vector<uint8_t>{0, 1}));

  OpTester n("aten.bitwise_not.default");
  n.AddArg(I64Input(n, {3}, {0, 5, -1}));
  ASSERT_TRUE(n.Prepare().ok()) << n.Prepare();
  ASSERT_TRUE(n.Run().ok());
  EXPECT_EQ(n.OutputI64(0), (std::vector<int64_t>{-1, -6, 0}));

  OpTester f("aten.bitwise_or.Tensor");
  f.AddArg(f.Input(F32({1}), {1}));
  f.AddArg(f.Input(F32({1}), {2}));
  EXPECT_TRUE(IsInvalidArgument(f.Prepare(), "floating-point"));
}

// clamp with tensor bounds (broadcast, one absent) and of integers.
TEST(BinaryMathTest, ClampWithTensorBoundsAndOfIntegers) {
  const auto x = RandomFloats(12, 61, -3, 3);
  const auto lo = RandomFloats(4, 62, -2, 0);
  OpTester t("aten.clamp.Tensor");
  t.AddArg(t.Input(F32({3, 4}), x));
  t.AddArg(t.Input(F32({4}), lo));
  t.AddArg(NoneArg());
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 12; ++i) want.push_back(std::max(x[i], lo[i % 4]));
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester i("aten.clamp.default");
  i.AddArg(I64Input(i, {4}, {-9, 2, 7, 100}));
  i.AddArg(IntArg(0));
  i.AddArg(IntArg(8));
  ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
  EXPECT_EQ(i.output_metas()[0], I64({4}));
  ASSERT_TRUE(i.Run().ok());
  EXPECT_EQ(i.OutputI64(0), (std::vector<int64_t>{0, 2, 7, 8}));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester n("aten.clamp.Tensor");
  n.AddArg(n.Input(F32({2}), {nan, 1}));
  n.AddArg(NoneArg());
  n.AddArg(n.Input(F32({2}), {0, nan}));
  ASSERT_TRUE(n.Prepare().ok()) << n.Prepare();
  ASSERT_TRUE(n.Run().ok());
  EXPECT_TRUE(std::isnan(n.OutputF32(0)[0]) && std::isnan(n.OutputF32(0)[1]));
}

TEST(BinaryMathTest, RejectsAnUnknownRoundingMode) {
  OpTester t("aten.div.Tensor_mode");
  t.AddArg(t.Input(F32({1}), {1}));
  t.AddArg(t.Input(F32({1}), {2}));
  t.AddKwarg("rounding_mode", StringArg("ceil"));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "rounding_mode"));
}

}  // namespace
}  // namespace kiln::runtime::testing
