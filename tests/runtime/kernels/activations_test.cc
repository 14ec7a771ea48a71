// Tests the pointwise activations (clamp, hardtanh, sigmoid, gelu with both
// approximations, hardswish, hardsigmoid, silu) against double-precision
// formulas, including NaN and infinities.
#include <cmath>
#include <functional>
#include <limits>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Random values in [-8, 8) plus specials at the front.
std::vector<float> Inputs(int64_t n) {
  std::vector<float> x = RandomFloats(n, 21, -8.0f, 8.0f);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -3.0f, 3.0f, 6.0f};
  for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i) {
    x[i] = specials[i];
  }
  return x;
}

double Clamp(double x, double lo, double hi) {
  return std::isnan(x) ? x : std::min(std::max(x, lo), hi);
}

struct ActCase {
  const char* target;
  std::vector<Arg> extra;
  std::function<double(double)> ref;
};

class ActivationTest : public ::testing::TestWithParam<ActCase> {};

TEST_P(ActivationTest, MatchesReference) {
  const ActCase& c = GetParam();
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {9}, {2, 16, 33, 33}}) {
    const auto x = Inputs(NumElements(shape));
    OpTester t(c.target);
    t.AddArg(t.Input(F32(shape), x));
    for (const Arg& a : c.extra) t.AddArg(a);
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32(shape));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected;
    for (float v : x) expected.push_back(c.ref(v));
    // Float transcendental functions: a few ulps, plus the absolute error
    // of 1 + erf(x) cancelling for negative x (ATen's formula has it too).
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 2e-6, 1e-6)) << c.target;
  }
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

INSTANTIATE_TEST_SUITE_P(
    All, ActivationTest,
    ::testing::Values(
        ActCase{"aten.clamp.default", {FloatArg(0.0), FloatArg(6.0)},
                [](double x) { return Clamp(x, 0, 6); }},
        ActCase{"aten.clamp.default", {NoneArg(), IntArg(1)},
                [](double x) { return Clamp(x, -INFINITY, 1); }},
        ActCase{"aten.clamp.default", {FloatArg(-0.5)},
                [](double x) { return Clamp(x, -0.5, INFINITY); }},
        // min > max: everything becomes max, as in ATen.
        ActCase{"aten.clamp.default", {FloatArg(2.0), FloatArg(1.0)},
                [](double x) { return Clamp(x, 2, 1); }},
        ActCase{"aten.hardtanh.default", {},
                [](double x) { return Clamp(x, -1, 1); }},
        ActCase{"aten.hardtanh.default", {FloatArg(0.0), FloatArg(6.0)},
                [](double x) { return Clamp(x, 0, 6); }},
        ActCase{"aten.sigmoid.default", {}, Sigmoid},
        ActCase{"aten.gelu.default", {},
                [](double x) {
                  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
                }},
        ActCase{"aten.gelu.default", {StringArg("tanh")},
                [](double x) {
                  const double k = std::sqrt(2.0 / M_PI);
                  return 0.5 * x *
                         (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
                }},
        ActCase{"aten.hardswish.default", {},
                [](double x) { return x * Clamp(x + 3, 0, 6) / 6; }},
        ActCase{"aten.hardsigmoid.default", {},
                [](double x) { return Clamp(x + 3, 0, 6) / 6; }},
        ActCase{"aten.silu.default", {},
                [](double x) {
                  // x * sigmoid(x), with silu(-inf) = -inf * 0 = NaN as in
                  // ATen's x / (1 + exp(-x)).
                  return std::isinf(x) && x < 0 ? NAN : x * Sigmoid(x);
                }},
        ActCase{"aten.leaky_relu.default", {},
                [](double x) { return x > 0 ? x : x * static_cast<double>(0.01f); }},
        ActCase{"aten.leaky_relu.default", {FloatArg(0.2)},
                [](double x) { return x > 0 ? x : x * static_cast<double>(0.2f); }},
        ActCase{"aten.elu.default", {},
                [](double x) { return x > 0 ? x : std::expm1(x); }},
        ActCase{"aten.elu.default", {FloatArg(1.5), FloatArg(2.0), FloatArg(0.5)},
                [](double x) { return x > 0 ? 2 * x : 3 * std::expm1(0.5 * x); }}));

TEST(ActivationTest, GeluTakesApproximateAsKwarg) {
  const auto x = Inputs(16);
  OpTester t("aten.gelu.default");
  t.AddArg(t.Input(F32({16}), x));
  t.AddKwarg("approximate", StringArg("none"));
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected;
  for (float v : x) expected.push_back(0.5 * v * (1 + std::erf(v / std::sqrt(2.0))));
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 2e-6, 1e-6));
}

TEST(ActivationTest, GeluRejectsUnknownApproximation) {
  OpTester t("aten.gelu.default");
  t.AddArg(t.Input(F32({4}), RandomFloats(4, 1)));
  t.AddArg(StringArg("sigmoid"));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "approximate must be"));
}

TEST(ActivationTest, ClampRejectsNoBounds) {
  OpTester t("aten.clamp.default");
  t.AddArg(t.Input(F32({4}), RandomFloats(4, 1)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "at least one of"));
}

TEST(ActivationTest, ClampRefusesTensorBounds) {
  OpTester t("aten.clamp.default");
  t.AddArg(t.Input(F32({4}), RandomFloats(4, 1)));
  t.AddArg(t.Input(F32({}), {0.0f}));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(ActivationTest, SigmoidRejectsNonF32Input) {
  OpTester t("aten.sigmoid.default");
  std::vector<int64_t> x(3, 1);
  t.AddArg(t.RawInput(TensorMeta{DType::kI64, {3}}, x.data(), 24));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "self must be f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
