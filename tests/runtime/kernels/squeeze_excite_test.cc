// kiln.squeeze_excite against the block computed here in double from its
// definition (mean over H and W, two matrix-vector products with their
// activations, the gate times x), in each activation layout.
#include <cmath>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

constexpr int64_t kN = 2, kC = 24, kH = 5, kW = 3, kR = 5;

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// x[n, c, h, w] (logical NCHW index) -> index in `layout`'s dense form.
int64_t Index(int layout, int64_t n, int64_t c, int64_t p) {
  const int64_t hw = kH * kW;
  switch (layout) {
    case 1:  // NHWC
      return (n * hw + p) * kC + c;
    case 2:  // [N, C/8, H, W, 8]
      return ((n * (kC / 8) + c / 8) * hw + p) * 8 + c % 8;
    default:
      return (n * kC + c) * hw + p;
  }
}

std::vector<int64_t> Shape(int layout) {
  switch (layout) {
    case 1:
      return {kN, kH, kW, kC};
    case 2:
      return {kN, kC / 8, kH, kW, 8};
    default:
      return {kN, kC, kH, kW};
  }
}

struct Case {
  int layout;
  bool biases;
  std::string act1, act2;
};

TEST(SqueezeExciteTest, MatchesTheBlockInEveryLayout) {
  const Case cases[] = {{0, true, "relu", "sigmoid"},
                        {1, true, "silu", "sigmoid"},
                        {2, true, "relu", "hardsigmoid"},
                        {2, false, "silu", "sigmoid"},
                        {1, false, "relu", "hardsigmoid"}};
  const int64_t hw = kH * kW;
  const auto x_nchw = RandomFloats(kN * kC * hw, 1, -2, 2);
  const auto w1 = RandomFloats(kR * kC, 2), b1 = RandomFloats(kR, 3);
  const auto w2 = RandomFloats(kC * kR, 4), b2 = RandomFloats(kC, 5);
  auto act = [](const std::string& name, double v) {
    if (name == "relu") return v > 0 ? v : 0.0;
    if (name == "silu") return v * Sigmoid(v);
    if (name == "sigmoid") return Sigmoid(v);
    return std::min(std::max(v / 6 + 0.5, 0.0), 1.0);  // hardsigmoid
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.layout);
    std::vector<float> x(x_nchw.size());
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t k = 0; k < kC; ++k)
        for (int64_t p = 0; p < hw; ++p) x[Index(c.layout, n, k, p)] = x_nchw[(n * kC + k) * hw + p];
    OpTester t("kiln.squeeze_excite");
    t.AddArg(t.Input(F32(Shape(c.layout)), x));
    t.AddArg(t.Input(F32({kR, kC, 1, 1}), w1));
    t.AddArg(c.biases ? t.Input(F32({kR}), b1) : NoneArg());
    t.AddArg(t.Input(F32({kC, kR, 1, 1}), w2));
    t.AddArg(c.biases ? t.Input(F32({kC}), b2) : NoneArg());
    t.AddArg(ListArg({StringArg(c.act1)}));
    t.AddArg(ListArg({StringArg(c.act2)}));
    t.AddArg(IntArg(c.layout));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32(Shape(c.layout)));
    ASSERT_TRUE(t.Run().ok());

    std::vector<double> want(x.size());
    for (int64_t n = 0; n < kN; ++n) {
      std::vector<double> mean(kC, 0.0), hidden(kR, 0.0);
      for (int64_t k = 0; k < kC; ++k) {
        for (int64_t p = 0; p < hw; ++p) mean[k] += x_nchw[(n * kC + k) * hw + p];
        mean[k] /= hw;
      }
      for (int64_t j = 0; j < kR; ++j) {
        double s = c.biases ? b1[j] : 0.0;
        for (int64_t k = 0; k < kC; ++k) s += w1[j * kC + k] * mean[k];
        hidden[j] = act(c.act1, s);
      }
      for (int64_t k = 0; k < kC; ++k) {
        double s = c.biases ? b2[k] : 0.0;
        for (int64_t j = 0; j < kR; ++j) s += w2[k * kR + j] * hidden[j];
        const double gate = act(c.act2, s);
        for (int64_t p = 0; p < hw; ++p) {
          want[Index(c.layout, n, k, p)] = x_nchw[(n * kC + k) * hw + p] * gate;
        }
      }
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-5, 1e-6));
  }
}

TEST(SqueezeExciteTest, RejectsMismatchedWeightsLayoutsAndResidualAdds) {
  auto prepare = [](std::vector<int64_t> x_shape, std::vector<int64_t> w2_shape,
                    std::string act, int64_t layout) {
    OpTester t("kiln.squeeze_excite");
    t.AddArg(t.Input(F32(x_shape), RandomFloats(NumElements(x_shape), 1)));
    t.AddArg(t.Input(F32({4, 16, 1, 1}), RandomFloats(64, 2)));
    t.AddArg(NoneArg());
    t.AddArg(t.Input(F32(w2_shape), RandomFloats(NumElements(w2_shape), 3)));
    t.AddArg(NoneArg());
    t.AddArg(ListArg({StringArg("relu")}));
    t.AddArg(ListArg({StringArg(act)}));
    t.AddArg(IntArg(layout));
    return t.Prepare();
  };
  EXPECT_TRUE(prepare({1, 16, 3, 3}, {16, 4, 1, 1}, "sigmoid", 0).ok());
  EXPECT_TRUE(prepare({1, 2, 3, 3, 8}, {16, 4, 1, 1}, "sigmoid", 2).ok());
  EXPECT_TRUE(IsInvalidArgument(prepare({1, 16, 3, 3}, {16, 5, 1, 1}, "sigmoid", 0), "w2"));
  // A plain shape read as blocked: its last dimension is not 8 channels.
  EXPECT_TRUE(IsInvalidArgument(prepare({1, 16, 3, 3}, {16, 4, 1, 1}, "sigmoid", 2), "layout"));
  EXPECT_TRUE(IsInvalidArgument(prepare({1, 16, 3, 3}, {16, 4, 1, 1}, "sigmoid", 3), "layout"));
  EXPECT_EQ(prepare({1, 16, 3, 3}, {16, 4, 1, 1}, "add", 0).code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime::testing
