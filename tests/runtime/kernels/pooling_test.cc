// Tests aten.max_pool2d_with_indices, aten.avg_pool2d and
// aten._adaptive_avg_pool2d against naive references computed here. Output
// shapes are PyTorch's (checked by hand against eager for the ceil_mode
// cases).
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct PoolCase {
  std::vector<int64_t> input;  // CHW or NCHW
  int64_t k, s, p, d;
  bool ceil_mode;
  std::vector<int64_t> out;  // expected output shape
};

// Windows in padded coordinates; positions outside the input are skipped.
void ReferenceMaxPool(const PoolCase& c, const std::vector<float>& x,
                      std::vector<double>* out, std::vector<int64_t>* idx) {
  const int r = static_cast<int>(c.input.size());
  const int64_t h = c.input[r - 2], w = c.input[r - 1];
  const int64_t oh = c.out[r - 2], ow = c.out[r - 1];
  const int64_t planes = NumElements(c.input) / (h * w);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -INFINITY;
        int64_t best_i = -1;
        for (int64_t ky = 0; ky < c.k; ++ky)
          for (int64_t kx = 0; kx < c.k; ++kx) {
            const int64_t iy = oy * c.s - c.p + ky * c.d;
            const int64_t ix = ox * c.s - c.p + kx * c.d;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = x[pl * h * w + iy * w + ix];
            if (best_i < 0 || v > best) {
              best = v;
              best_i = iy * w + ix;
            }
          }
        out->push_back(best);
        idx->push_back(best_i);
      }
}

class MaxPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolTest, MatchesReference) {
  const PoolCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 7);
  OpTester t("aten.max_pool2d_with_indices.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(IntListArg({c.k, c.k}));
  t.AddArg(IntListArg({c.s, c.s}));
  t.AddArg(IntListArg({c.p, c.p}));
  t.AddArg(IntListArg({c.d, c.d}));
  t.AddArg(BoolArg(c.ceil_mode));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 2u);
  EXPECT_EQ(t.output_metas()[0], F32(c.out));
  EXPECT_EQ(t.output_metas()[1], (TensorMeta{DType::kI64, c.out}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected;
  std::vector<int64_t> expected_idx;
  ReferenceMaxPool(c, x, &expected, &expected_idx);
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));  // exact: a copy
  EXPECT_EQ(t.OutputI64(1), expected_idx);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MaxPoolTest,
    ::testing::Values(
        // resnet18: 3x3 stride 2 pad 1 on 112x112.
        PoolCase{{1, 64, 112, 112}, 3, 2, 1, 1, false, {1, 64, 56, 56}},
        PoolCase{{2, 3, 8, 8}, 2, 2, 0, 1, false, {2, 3, 4, 4}},
        PoolCase{{3, 7, 7}, 3, 2, 1, 1, false, {3, 4, 4}},  // CHW
        PoolCase{{1, 2, 9, 9}, 3, 2, 1, 2, false, {1, 2, 4, 4}},  // dilation
        // ceil_mode adds a partial last window...
        PoolCase{{1, 2, 6, 6}, 3, 2, 0, 1, true, {1, 2, 3, 3}},
        // ...unless it would start in the right padding: 5 -> 2, not 3.
        PoolCase{{1, 2, 5, 5}, 3, 3, 1, 1, true, {1, 2, 2, 2}},
        PoolCase{{1, 2, 5, 5}, 3, 3, 1, 1, false, {1, 2, 2, 2}}));

TEST(MaxPoolTest, EmptyStrideMeansKernelSizeAndIntsExpand) {
  const auto x = RandomFloats(2 * 8 * 8, 3);
  OpTester t("aten.max_pool2d_with_indices.default");
  t.AddArg(t.Input(F32({2, 8, 8}), x));
  t.AddArg(IntArg(2));
  t.AddArg(IntListArg({}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4, 4}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected;
  std::vector<int64_t> idx;
  ReferenceMaxPool({{2, 8, 8}, 2, 2, 0, 1, false, {2, 4, 4}}, x, &expected,
                   &idx);
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
  EXPECT_EQ(t.OutputI64(1), idx);
}

TEST(MaxPoolTest, MaxPoolPropagatesNaN) {
  std::vector<float> x = {1, 2, 3, 4};
  x[1] = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.max_pool2d_with_indices.default");
  t.AddArg(t.Input(F32({1, 2, 2}), x));
  t.AddArg(IntListArg({2, 2}));
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(std::isnan(t.OutputF32(0)[0]));
  EXPECT_EQ(t.OutputI64(1)[0], 1);
}

absl::Status PrepareMaxPool(std::vector<int64_t> input, std::vector<Arg> rest) {
  OpTester t("aten.max_pool2d_with_indices.default");
  t.AddArg(t.Input(F32(input), RandomFloats(NumElements(input), 1)));
  for (Arg& a : rest) t.AddArg(a);
  return t.Prepare();
}

TEST(MaxPoolTest, MaxPoolRejectsPaddingOverHalfKernel) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareMaxPool({1, 1, 8, 8}, {IntListArg({3, 3}), IntListArg({1, 1}),
                                    IntListArg({2, 2})}),
      "half the kernel size"));
}

TEST(MaxPoolTest, MaxPoolRejectsNonPositiveStride) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareMaxPool({1, 1, 8, 8}, {IntListArg({2, 2}), IntListArg({0, 1})}),
      "stride must be positive"));
}

TEST(MaxPoolTest, MaxPoolRejectsKernelLargerThanInput) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareMaxPool({1, 1, 2, 2}, {IntListArg({3, 3})}), "too small"));
}

TEST(MaxPoolTest, MaxPoolRejectsTwoDimensionalInput) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareMaxPool({8, 8}, {IntListArg({2, 2})}), "3-D (CHW) or 4-D"));
}

TEST(MaxPoolTest, MaxPoolRejectsThreeValueKernel) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareMaxPool({1, 1, 8, 8}, {IntListArg({2, 2, 2})}),
      "must have one value or 2"));
}

// ---- avg_pool2d ----

struct AvgCase {
  std::vector<int64_t> input;
  int64_t k, s, p;
  bool ceil_mode, count_include_pad;
  int64_t divisor_override;  // 0: none
  std::vector<int64_t> out;
};

std::vector<double> ReferenceAvgPool(const AvgCase& c,
                                     const std::vector<float>& x) {
  const int r = static_cast<int>(c.input.size());
  const int64_t h = c.input[r - 2], w = c.input[r - 1];
  const int64_t oh = c.out[r - 2], ow = c.out[r - 1];
  const int64_t planes = NumElements(c.input) / (h * w);
  std::vector<double> out;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double sum = 0;
        int64_t inside = 0, padded = 0;
        for (int64_t ky = 0; ky < c.k; ++ky)
          for (int64_t kx = 0; kx < c.k; ++kx) {
            const int64_t iy = oy * c.s - c.p + ky, ix = ox * c.s - c.p + kx;
            // Padding counts, but not window parts beyond it (ceil_mode).
            if (iy < h + c.p && ix < w + c.p) ++padded;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            ++inside;
            sum += x[pl * h * w + iy * w + ix];
          }
        const double div = c.divisor_override ? c.divisor_override
                           : c.count_include_pad ? padded
                                                 : inside;
        out.push_back(inside == 0 ? 0.0 : sum / div);
      }
  return out;
}

class AvgPoolTest : public ::testing::TestWithParam<AvgCase> {};

TEST_P(AvgPoolTest, MatchesReference) {
  const AvgCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 9);
  OpTester t("aten.avg_pool2d.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(IntListArg({c.k, c.k}));
  t.AddArg(IntListArg({c.s, c.s}));
  t.AddArg(IntListArg({c.p, c.p}));
  t.AddArg(BoolArg(c.ceil_mode));
  t.AddArg(BoolArg(c.count_include_pad));
  t.AddArg(c.divisor_override ? IntArg(c.divisor_override) : NoneArg());
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.out));
  ASSERT_TRUE(t.Run().ok());
  // Float sums of at most k*k values.
  EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceAvgPool(c, x), 1e-5, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AvgPoolTest,
    ::testing::Values(
        AvgCase{{1, 3, 8, 8}, 2, 2, 0, false, true, 0, {1, 3, 4, 4}},
        AvgCase{{2, 2, 7, 7}, 3, 2, 1, false, true, 0, {2, 2, 4, 4}},
        AvgCase{{2, 2, 7, 7}, 3, 2, 1, false, false, 0, {2, 2, 4, 4}},
        AvgCase{{2, 6, 6}, 3, 2, 1, true, true, 0, {2, 4, 4}},
        AvgCase{{2, 6, 6}, 3, 2, 1, true, false, 0, {2, 4, 4}},
        AvgCase{{1, 1, 5, 5}, 3, 3, 1, true, true, 0, {1, 1, 2, 2}},
        AvgCase{{1, 2, 6, 6}, 3, 2, 1, false, true, 5, {1, 2, 3, 3}}));

TEST(AvgPoolTest, AvgPoolRejectsZeroDivisorOverride) {
  OpTester t("aten.avg_pool2d.default");
  t.AddArg(t.Input(F32({1, 1, 4, 4}), RandomFloats(16, 1)));
  t.AddArg(IntListArg({2, 2}));
  t.AddKwarg("divisor_override", IntArg(0));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "divisor_override"));
}

TEST(AvgPoolTest, AvgPoolRejectsNonPositiveKernel) {
  OpTester t("aten.avg_pool2d.default");
  t.AddArg(t.Input(F32({1, 1, 4, 4}), RandomFloats(16, 1)));
  t.AddArg(IntListArg({0, 2}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "kernel_size must be positive"));
}

// ---- _adaptive_avg_pool2d ----

struct AdaptiveCase {
  std::vector<int64_t> input;
  int64_t oh, ow;
};

class AdaptiveAvgPoolTest : public ::testing::TestWithParam<AdaptiveCase> {};

TEST_P(AdaptiveAvgPoolTest, MatchesReference) {
  const AdaptiveCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 11);
  OpTester t("aten._adaptive_avg_pool2d.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(IntListArg({c.oh, c.ow}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  std::vector<int64_t> out_shape(c.input.begin(), c.input.end() - 2);
  out_shape.push_back(c.oh);
  out_shape.push_back(c.ow);
  EXPECT_EQ(t.output_metas()[0], F32(out_shape));
  ASSERT_TRUE(t.Run().ok());
  const int r = static_cast<int>(c.input.size());
  const int64_t h = c.input[r - 2], w = c.input[r - 1];
  std::vector<double> expected;
  for (int64_t pl = 0; pl < NumElements(c.input) / (h * w); ++pl)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        const int64_t y0 =
            static_cast<int64_t>(std::floor(1.0 * oy * h / c.oh));
        const int64_t y1 =
            static_cast<int64_t>(std::ceil(1.0 * (oy + 1) * h / c.oh));
        const int64_t x0 =
            static_cast<int64_t>(std::floor(1.0 * ox * w / c.ow));
        const int64_t x1 =
            static_cast<int64_t>(std::ceil(1.0 * (ox + 1) * w / c.ow));
        double sum = 0;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            sum += x[pl * h * w + iy * w + ix];
          }
        expected.push_back(sum / ((y1 - y0) * (x1 - x0)));
      }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-5, 1e-6));
}

// adaptive_max_pool2d over the same windows: the maximum and its flat
// index in the plane.
TEST_P(AdaptiveAvgPoolTest, MaxMatchesReference) {
  const AdaptiveCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 12);
  OpTester t("aten.adaptive_max_pool2d.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(IntListArg({c.oh, c.ow}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 2u);
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  const int r = static_cast<int>(c.input.size());
  const int64_t h = c.input[r - 2], w = c.input[r - 1];
  std::vector<double> want;
  std::vector<int64_t> want_idx;
  for (int64_t pl = 0; pl < NumElements(c.input) / (h * w); ++pl)
    for (int64_t oy = 0; oy < c.oh; ++oy)
      for (int64_t ox = 0; ox < c.ow; ++ox) {
        const auto y0 = static_cast<int64_t>(std::floor(1.0 * oy * h / c.oh));
        const auto y1 = static_cast<int64_t>(std::ceil(1.0 * (oy + 1) * h / c.oh));
        const auto x0 = static_cast<int64_t>(std::floor(1.0 * ox * w / c.ow));
        const auto x1 = static_cast<int64_t>(std::ceil(1.0 * (ox + 1) * w / c.ow));
        double best = -1e30;
        int64_t at = -1;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix) {
            if (x[pl * h * w + iy * w + ix] > best) {
              best = x[pl * h * w + iy * w + ix];
              at = iy * w + ix;
            }
          }
        want.push_back(best);
        want_idx.push_back(at);
      }
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 0, 0));
  EXPECT_EQ(out.As<int64_t>(1), want_idx);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AdaptiveAvgPoolTest,
    ::testing::Values(AdaptiveCase{{1, 512, 7, 7}, 1, 1},  // resnet18 head
                      AdaptiveCase{{2, 3, 10, 9}, 3, 4},   // overlapping
                      AdaptiveCase{{3, 5, 5}, 7, 2},       // upsampling
                      AdaptiveCase{{1, 2, 6, 6}, 6, 6}));

TEST(AdaptiveAvgPoolTest, AcceptsSingleIntOutputSize) {
  OpTester t("aten._adaptive_avg_pool2d.default");
  t.AddArg(t.Input(F32({1, 2, 4, 4}), RandomFloats(32, 1)));
  t.AddArg(IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({1, 2, 2, 2}));
}

TEST(AdaptiveAvgPoolTest, AdaptiveAvgPoolRejectsNegativeOutputSize) {
  OpTester t("aten._adaptive_avg_pool2d.default");
  t.AddArg(t.Input(F32({1, 2, 4, 4}), RandomFloats(32, 1)));
  t.AddArg(IntListArg({-1, 2}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "non-negative"));
}

TEST(AdaptiveAvgPoolTest, AdaptiveAvgPoolRejectsEmptySpatialInput) {
  OpTester t("aten._adaptive_avg_pool2d.default");
  t.AddArg(t.Input(F32({1, 2, 0, 4}), {}));
  t.AddArg(IntListArg({1, 1}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "non-zero"));
}

}  // namespace
}  // namespace kiln::runtime::testing
