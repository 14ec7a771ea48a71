// Tests aten.add.Tensor / aten.sub.Tensor (broadcasting, scalar other,
// alpha), aten.mul.Tensor / aten.mul.Scalar / aten.div.Tensor and
// aten.relu.default against double-precision references computed here.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

// Reference broadcasting add over shapes padded to the output rank.
std::vector<double> ReferenceAdd(const std::vector<int64_t>& out,
                                 const std::vector<int64_t>& as,
                                 const std::vector<float>& a,
                                 const std::vector<int64_t>& bs,
                                 const std::vector<float>& b, double alpha) {
  const size_t rank = out.size();
  auto pad = [&](const std::vector<int64_t>& s) {
    std::vector<int64_t> p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const auto pa = pad(as), pb = pad(bs);
  std::vector<double> r(NumElements(out));
  for (int64_t i = 0; i < static_cast<int64_t>(r.size()); ++i) {
    int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (int d = static_cast<int>(rank) - 1; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      ia += (pa[d] == 1 ? 0 : idx) * sa;
      ib += (pb[d] == 1 ? 0 : idx) * sb;
      sa *= pa[d];
      sb *= pb[d];
    }
    r[i] = static_cast<double>(a[ia]) + alpha * b[ib];
  }
  return r;
}

struct AddCase {
  std::vector<int64_t> a, b, out;
  double alpha;
};

class AddTest : public ::testing::TestWithParam<AddCase> {};

TEST_P(AddTest, MatchesReference) {
  const AddCase& c = GetParam();
  const auto a = RandomFloats(NumElements(c.a), 1);
  const auto b = RandomFloats(NumElements(c.b), 2);
  OpTester t("aten.add.Tensor");
  t.AddArg(t.Input(F32(c.a), a));
  t.AddArg(t.Input(F32(c.b), b));
  if (c.alpha != 1.0) t.AddKwarg("alpha", FloatArg(c.alpha));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.out));
  ASSERT_TRUE(t.Run().ok());
  // One rounding of a sum of two terms.
  EXPECT_TRUE(AllClose(t.OutputF32(0),
                       ReferenceAdd(c.out, c.a, a, c.b, b, c.alpha), 1e-6,
                       1e-6));
}

INSTANTIATE_TEST_SUITE_P(
    Broadcasting, AddTest,
    ::testing::Values(
        AddCase{{2, 3, 4}, {2, 3, 4}, {2, 3, 4}, 1.0},
        AddCase{{1, 64, 56, 56}, {1, 64, 56, 56}, {1, 64, 56, 56}, 1.0},
        AddCase{{4, 5}, {5}, {4, 5}, 1.0},          // row vector
        AddCase{{4, 5}, {4, 1}, {4, 5}, 2.0},       // column vector
        AddCase{{3, 1, 5}, {1, 4, 1}, {3, 4, 5}, 1.0},  // both broadcast
        AddCase{{2, 3, 4, 5}, {3, 1, 5}, {2, 3, 4, 5}, -0.5},
        AddCase{{1}, {2, 3}, {2, 3}, 1.0},          // self broadcast
        AddCase{{}, {}, {}, 3.0},                   // scalars
        AddCase{{2, 3}, {}, {2, 3}, 1.0},           // 0-dim other
        AddCase{{0, 3}, {3}, {0, 3}, 1.0}));        // empty

TEST(AddTest, AddsIntAndFloatScalarOther) {
  const auto a = RandomFloats(10, 3);
  for (Arg other : {IntArg(3), FloatArg(-0.25)}) {
    OpTester t("aten.add.Tensor");
    t.AddArg(t.Input(F32({2, 5}), a));
    t.AddArg(other);
    t.AddKwarg("alpha", IntArg(2));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    const double v = other.kind == Arg::Kind::kInt ? other.i : other.f;
    std::vector<double> expected;
    for (float x : a) expected.push_back(x + 2.0 * v);
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-6, 1e-6));
  }
}

TEST(AddTest, AddRejectsNonBroadcastableShapes) {
  OpTester t("aten.add.Tensor");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(t.Input(F32({4, 3}), RandomFloats(12, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "not broadcastable"));
}

TEST(AddTest, AddPromotesI64OtherToF32) {
  // Mixed dtypes go to binary_math.cc's typed kernel (PyTorch promotion).
  OpTester t("aten.add.Tensor");
  std::vector<int64_t> b = {1, 2, 3};
  t.AddArg(t.Input(F32({2, 3}), {0, 0, 0, 1, 1, 1}));
  t.AddArg(t.RawInput(TensorMeta{DType::kI64, {3}}, b.data(), 24));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1, 2, 3, 2, 3, 4}, 0, 0));
}

TEST(AddTest, AddRejectsStringOther) {
  OpTester t("aten.add.Tensor");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(StringArg("x"));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "tensor or a number"));
}

// The same broadcasting walk as ReferenceAdd, for any binary function.
template <typename F>
std::vector<double> ReferenceBinary(const std::vector<int64_t>& out,
                                    const std::vector<int64_t>& as,
                                    const std::vector<float>& a,
                                    const std::vector<int64_t>& bs,
                                    const std::vector<float>& b, F f) {
  // ReferenceAdd with alpha 0 gives a[ia]; recover ib the same way by
  // swapping the roles.
  const std::vector<double> ra = ReferenceAdd(out, as, a, bs,
                                              std::vector<float>(b.size(), 0), 0);
  const std::vector<double> rb = ReferenceAdd(out, bs, b, as,
                                              std::vector<float>(a.size(), 0), 0);
  std::vector<double> r(ra.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = f(ra[i], rb[i]);
  return r;
}

struct ArithCase {
  const char* target;
  std::vector<int64_t> a, b;
};

class ArithTest : public ::testing::TestWithParam<ArithCase> {};

TEST_P(ArithTest, MatchesReference) {
  const ArithCase& c = GetParam();
  const auto a = RandomFloats(NumElements(c.a), 5);
  // Divisors away from 0 so the quotient is well conditioned.
  const auto b = RandomFloats(NumElements(c.b), 6, 0.5f, 2.0f);
  OpTester t(c.target);
  t.AddArg(t.Input(F32(c.a), a));
  t.AddArg(t.Input(F32(c.b), b));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  const std::vector<int64_t> out = t.output_metas()[0].shape;
  ASSERT_TRUE(t.Run().ok());
  const std::string target = c.target;
  std::vector<double> expected;
  if (target == "aten.sub.Tensor") {
    expected = ReferenceBinary(out, c.a, a, c.b, b,
                               [](double x, double y) { return x - y; });
  } else if (target == "aten.mul.Tensor") {
    expected = ReferenceBinary(out, c.a, a, c.b, b,
                               [](double x, double y) { return x * y; });
  } else {
    expected = ReferenceBinary(out, c.a, a, c.b, b,
                               [](double x, double y) { return x / y; });
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-6, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(
    SubMulDiv, ArithTest,
    ::testing::Values(
        ArithCase{"aten.sub.Tensor", {2, 3, 4}, {2, 3, 4}},
        ArithCase{"aten.sub.Tensor", {1, 64, 49, 49}, {64, 1, 49}},
        ArithCase{"aten.mul.Tensor", {1, 96, 28, 28}, {1, 96, 1, 1}},  // SE
        ArithCase{"aten.mul.Tensor", {2, 5}, {}},
        ArithCase{"aten.mul.Tensor", {7, 1, 768}, {768}},  // layer scale
        ArithCase{"aten.div.Tensor", {3, 4}, {4}},
        ArithCase{"aten.div.Tensor", {}, {3, 1}}));

TEST(ArithTest, SubAppliesAlphaToOther) {
  const auto a = RandomFloats(6, 7);
  const auto b = RandomFloats(6, 8);
  OpTester t("aten.sub.Tensor");
  t.AddArg(t.Input(F32({2, 3}), a));
  t.AddArg(t.Input(F32({2, 3}), b));
  t.AddKwarg("alpha", FloatArg(0.5));
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a[i] - 0.5 * b[i]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-6, 1e-6));
}

TEST(ArithTest, ScalarOtherForSubMulDivAndMulScalar) {
  const auto a = RandomFloats(10, 9);
  struct Case {
    const char* target;
    Arg other;
    double (*f)(double, double);
  };
  const Case cases[] = {
      {"aten.sub.Tensor", IntArg(3), [](double x, double y) { return x - y; }},
      {"aten.mul.Tensor", FloatArg(0.25), [](double x, double y) { return x * y; }},
      {"aten.mul.Scalar", FloatArg(0.125), [](double x, double y) { return x * y; }},
      {"aten.div.Tensor", IntArg(6), [](double x, double y) { return x / y; }},
      {"aten.div.Scalar", FloatArg(-2.5), [](double x, double y) { return x / y; }},
      {"aten.add.Scalar", FloatArg(1.5), [](double x, double y) { return x + y; }},
      {"aten.sub.Scalar", FloatArg(0.75), [](double x, double y) { return x - y; }},
  };
  for (const Case& c : cases) {
    OpTester t(c.target);
    t.AddArg(t.Input(F32({2, 5}), a));
    t.AddArg(c.other);
    ASSERT_TRUE(t.Prepare().ok()) << c.target;
    ASSERT_TRUE(t.Run().ok());
    const double v = c.other.kind == Arg::Kind::kInt ? c.other.i : c.other.f;
    std::vector<double> expected;
    for (float x : a) expected.push_back(c.f(x, v));
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-6, 1e-7)) << c.target;
  }
}

TEST(ArithTest, DivByZeroGivesInfAndNaNLikeIeee) {
  OpTester t("aten.div.Tensor");
  t.AddArg(t.Input(F32({3}), {1.0f, -1.0f, 0.0f}));
  t.AddArg(t.Input(F32({3}), {0.0f, 0.0f, 0.0f}));
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  const auto y = t.OutputF32(0);
  EXPECT_TRUE(std::isinf(y[0]) && y[0] > 0);
  EXPECT_TRUE(std::isinf(y[1]) && y[1] < 0);
  EXPECT_TRUE(std::isnan(y[2]));
}

TEST(ArithTest, MulRejectsNonBroadcastableShapes) {
  OpTester t("aten.mul.Tensor");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(t.Input(F32({2}), RandomFloats(2, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "not broadcastable"));
}

TEST(ArithTest, DivRejectsMissingOther) {
  OpTester t("aten.div.Tensor");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "missing argument other"));
}

TEST(ReluTest, MatchesReferenceAndKeepsNaN) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {7}, {2, 64, 56, 56}}) {
    auto x = RandomFloats(NumElements(shape), 4);
    if (x.size() > 3) {
      x[1] = std::numeric_limits<float>::quiet_NaN();
      x[2] = -std::numeric_limits<float>::infinity();
    }
    OpTester t("aten.relu.default");
    t.AddArg(t.Input(F32(shape), x));
    ASSERT_TRUE(t.Prepare().ok());
    EXPECT_EQ(t.output_metas()[0], F32(shape));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected;
    for (float v : x) expected.push_back(std::isnan(v) ? v : std::max(0.0f, v));
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
  }
}

TEST(ReluTest, ReluRejectsNonF32Input) {
  OpTester t("aten.relu.default");
  std::vector<int64_t> x(3, 1);
  t.AddArg(t.RawInput(TensorMeta{DType::kI64, {3}}, x.data(), 24));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "self must be f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
