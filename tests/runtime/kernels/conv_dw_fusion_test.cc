// Tests kiln.conv2d_dw (1x1 convolution + 3x3 depthwise convolution as one
// oneDNN primitive) against a double-precision reference of the two
// convolutions computed here, on shapes oneDNN fuses for real and on shapes
// where it chains two kernels, and DepthwiseFusionPays' decisions.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "runtime/kernels/conv_dw_fusion.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct DwCase {
  int64_t n, c, h, w, m, stride;
  bool bias;
};

double Relu6(double v) { return std::min(6.0, std::max(0.0, v)); }

// relu6(dw3x3(relu6(conv1x1(x) + b1)) + b2), NHWC in and out.
std::vector<double> Reference(const DwCase& c, const std::vector<float>& x,
                              const std::vector<float>& w1, const std::vector<float>& b1,
                              const std::vector<float>& w2, const std::vector<float>& b2) {
  std::vector<double> mid(c.n * c.h * c.w * c.m);
  for (int64_t p = 0; p < c.n * c.h * c.w; ++p)
    for (int64_t o = 0; o < c.m; ++o) {
      double acc = c.bias ? b1[o] : 0.0;
      for (int64_t i = 0; i < c.c; ++i) acc += static_cast<double>(x[p * c.c + i]) * w1[o * c.c + i];
      mid[p * c.m + o] = Relu6(acc);
    }
  const int64_t oh = (c.h - 1) / c.stride + 1, ow = (c.w - 1) / c.stride + 1;
  std::vector<double> out(c.n * oh * ow * c.m);
  for (int64_t b = 0; b < c.n; ++b)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t xx = 0; xx < ow; ++xx)
        for (int64_t o = 0; o < c.m; ++o) {
          double acc = c.bias ? b2[o] : 0.0;
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t iy = y * c.stride - 1 + ky, ix = xx * c.stride - 1 + kx;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              acc += mid[((b * c.h + iy) * c.w + ix) * c.m + o] * w2[o * 9 + ky * 3 + kx];
            }
          out[((b * oh + y) * ow + xx) * c.m + o] = Relu6(acc);
        }
  return out;
}

Arg Relu6PostOps() {
  Arg a = IntListArg({});
  a.list.push_back(StringArg("clip:0:6"));
  return a;
}

class ConvDwTest : public ::testing::TestWithParam<DwCase> {};

TEST_P(ConvDwTest, MatchesReference) {
  const DwCase& c = GetParam();
  const auto x = RandomFloats(c.n * c.h * c.w * c.c, 1);
  const auto w1 = RandomFloats(c.m * c.c, 2), b1 = RandomFloats(c.m, 3);
  const auto w2 = RandomFloats(c.m * 9, 4), b2 = RandomFloats(c.m, 5);
  OpTester t("kiln.conv2d_dw");
  t.AddArg(t.Input(F32({c.n, c.h, c.w, c.c}), x));
  t.AddArg(t.Constant(F32({c.m, c.c, 1, 1}), w1));
  t.AddArg(c.bias ? t.Constant(F32({c.m}), b1) : NoneArg());
  t.AddArg(Relu6PostOps());
  t.AddArg(t.Constant(F32({c.m, 1, 3, 3}), w2));
  t.AddArg(c.bias ? t.Constant(F32({c.m}), b2) : NoneArg());
  t.AddArg(IntArg(c.stride));
  t.AddArg(Relu6PostOps());
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  const int64_t oh = (c.h - 1) / c.stride + 1, ow = (c.w - 1) / c.stride + 1;
  EXPECT_EQ(t.output_metas()[0], F32({c.n, oh, ow, c.m}));
  ASSERT_TRUE(t.Run().ok());
  // Sums of up to a few hundred products of values in [-1, 1].
  EXPECT_TRUE(AllClose(t.OutputF32(0), Reference(c, x, w1, b1, w2, b2), 1e-4, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvDwTest,
    ::testing::Values(
        // Small: oneDNN chains two kernels (still one kiln step).
        DwCase{1, 8, 9, 7, 24, 1, true}, DwCase{2, 5, 8, 8, 13, 2, false},
        // mobilenet_v2's second block at batch 1: fused for real on AVX2.
        DwCase{1, 16, 112, 112, 96, 2, true},
        // Odd sizes with stride 2 at a size oneDNN fuses.
        DwCase{2, 24, 57, 55, 144, 2, true}));

// The same fused pair with blocked input and output (layout code 2).
TEST(ConvDwTest, BlockedLayoutMatchesReference) {
  const DwCase c{1, 16, 40, 40, 96, 2, true};
  const auto x = RandomFloats(c.n * c.h * c.w * c.c, 1);
  const auto w1 = RandomFloats(c.m * c.c, 2), b1 = RandomFloats(c.m, 3);
  const auto w2 = RandomFloats(c.m * 9, 4), b2 = RandomFloats(c.m, 5);
  // NHWC [n, hw, ch] to blocked [n, ch/8, hw, 8].
  auto blocked = [](const auto& v, int64_t n, int64_t hw, int64_t ch) {
    std::vector<typename std::decay_t<decltype(v)>::value_type> out(v.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t k = 0; k < ch; ++k) {
          out[((i * (ch / 8) + k / 8) * hw + p) * 8 + k % 8] = v[(i * hw + p) * ch + k];
        }
    return out;
  };
  OpTester t("kiln.conv2d_dw");
  t.AddArg(t.Input(F32({c.n, c.c / 8, c.h, c.w, 8}), blocked(x, c.n, c.h * c.w, c.c)));
  t.AddArg(t.Constant(F32({c.m, c.c, 1, 1}), w1));
  t.AddArg(t.Constant(F32({c.m}), b1));
  t.AddArg(Relu6PostOps());
  t.AddArg(t.Constant(F32({c.m, 1, 3, 3}), w2));
  t.AddArg(t.Constant(F32({c.m}), b2));
  t.AddArg(IntArg(c.stride));
  t.AddArg(Relu6PostOps());
  t.AddArg(IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  const int64_t oh = (c.h - 1) / c.stride + 1, ow = (c.w - 1) / c.stride + 1;
  EXPECT_EQ(t.output_metas()[0], F32({c.n, c.m / 8, oh, ow, 8}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), blocked(Reference(c, x, w1, b1, w2, b2), c.n, oh * ow, c.m),
                       1e-4, 1e-4));
}

TEST(DepthwiseFusionPays, OnlyForLargeIntermediates) {
  std::vector<PostOp> relu6 = {*ParsePostOp("clip:0:6")};
  CompileOptions f32;
  // 14x14x384 at batch 1: 0.3 MB in between, nothing to gain.
  EXPECT_FALSE(DepthwiseFusionPays({1, 64, 14, 14, 384, 1}, relu6, relu6, f32));
  // A residual add is no eltwise post-op: never fused.
  std::vector<PostOp> add = {*ParsePostOp("add")};
  EXPECT_FALSE(DepthwiseFusionPays({8, 16, 112, 112, 96, 2}, add, relu6, f32));
}

TEST(ConvDwTest, RejectsAWeightThatIsNotOneByOne) {
  OpTester t("kiln.conv2d_dw");
  t.AddArg(t.Input(F32({1, 4, 4, 2}), RandomFloats(32, 1)));
  t.AddArg(t.Constant(F32({3, 2, 3, 3}), RandomFloats(54, 2)));
  t.AddArg(NoneArg());
  t.AddArg(IntListArg({}));
  t.AddArg(t.Constant(F32({3, 1, 3, 3}), RandomFloats(27, 3)));
  t.AddArg(NoneArg());
  t.AddArg(IntArg(1));
  t.AddArg(IntListArg({}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare()));
}

}  // namespace
}  // namespace kiln::runtime::testing
