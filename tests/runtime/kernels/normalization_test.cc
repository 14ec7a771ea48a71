// Tests aten.native_layer_norm and aten.native_group_norm (all three
// outputs), and kiln.group_norm_nhwc (group norm over channels-last
// tensors), against double-precision references.
#include <cmath>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

// Normalizes `groups` contiguous runs of `n` values of x; returns
// normalized values and per-group mean and rstd.
void ReferenceNorm(const std::vector<float>& x, int64_t groups, int64_t n,
                   double eps, std::vector<double>* y,
                   std::vector<double>* mean, std::vector<double>* rstd) {
  y->assign(x.size(), 0.0);
  mean->assign(groups, 0.0);
  rstd->assign(groups, 0.0);
  for (int64_t g = 0; g < groups; ++g) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[g * n + i];
    m /= n;
    for (int64_t i = 0; i < n; ++i) v += (x[g * n + i] - m) * (x[g * n + i] - m);
    v /= n;
    (*mean)[g] = m;
    (*rstd)[g] = 1 / std::sqrt(v + eps);
    for (int64_t i = 0; i < n; ++i) (*y)[g * n + i] = (x[g * n + i] - m) * (*rstd)[g];
  }
}

TEST(LayerNormTest, AffineOverLastDimWithStats) {
  const int64_t rows = 2 * 5, cols = 768;
  const auto x = RandomFloats(rows * cols, 1, -3, 5);
  const auto w = RandomFloats(cols, 2), b = RandomFloats(cols, 3);
  OpTester t("aten.native_layer_norm.default");
  t.AddArg(t.Input(F32({2, 5, cols}), x));
  t.AddArg(IntListArg({cols}));
  t.AddArg(t.Constant(F32({cols}), w));
  t.AddArg(t.Constant(F32({cols}), b));
  t.AddArg(FloatArg(1e-12));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 3u);
  EXPECT_EQ(t.output_metas()[0], F32({2, 5, cols}));
  EXPECT_EQ(t.output_metas()[1], F32({2, 5, 1}));
  EXPECT_EQ(t.output_metas()[2], F32({2, 5, 1}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> y, mean, rstd;
  ReferenceNorm(x, rows, cols, 1e-12, &y, &mean, &rstd);
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = y[i] * w[i % cols] + b[i % cols];
  EXPECT_TRUE(AllClose(out.As<float>(0), y, 1e-5, 1e-5));
  EXPECT_TRUE(AllClose(out.As<float>(1), mean, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(2), rstd, 1e-5, 0));
}

TEST(LayerNormTest, WithoutAffineOverTwoDims) {
  const auto x = RandomFloats(3 * 4 * 6, 4);
  OpTester t("aten.native_layer_norm.default");
  t.AddArg(t.Input(F32({3, 4, 6}), x));
  t.AddArg(IntListArg({4, 6}));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(FloatArg(1e-5));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[1], F32({3, 1, 1}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> y, mean, rstd;
  ReferenceNorm(x, 3, 24, 1e-5, &y, &mean, &rstd);
  EXPECT_TRUE(AllClose(out.As<float>(0), y, 1e-5, 1e-5));
}

TEST(LayerNormTest, RejectsNormalizedShapeThatIsNotASuffix) {
  OpTester t("aten.native_layer_norm.default");
  t.AddArg(t.Input(F32({3, 4}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({3}));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "suffix"));
}

TEST(LayerNormTest, RejectsWeightOfWrongShape) {
  OpTester t("aten.native_layer_norm.default");
  t.AddArg(t.Input(F32({3, 4}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({4}));
  t.AddArg(t.Input(F32({3}), RandomFloats(3, 2)));
  t.AddArg(NoneArg());
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "weight must have shape"));
}

TEST(GroupNormTest, AffinePerChannelWithStats) {
  const int64_t n = 2, c = 64, hw = 5 * 7, groups = 32;
  const auto x = RandomFloats(n * c * hw, 5, -2, 6);
  const auto w = RandomFloats(c, 6), b = RandomFloats(c, 7);
  OpTester t("aten.native_group_norm.default");
  t.AddArg(t.Input(F32({n, c, 5, 7}), x));
  t.AddArg(t.Constant(F32({c}), w));
  t.AddArg(t.Constant(F32({c}), b));
  for (int64_t v : {n, c, hw, groups}) t.AddArg(IntArg(v));
  t.AddArg(FloatArg(1e-5));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({n, c, 5, 7}));
  EXPECT_EQ(t.output_metas()[1], F32({n, groups}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> y, mean, rstd;
  ReferenceNorm(x, n * groups, (c / groups) * hw, 1e-5, &y, &mean, &rstd);
  for (int64_t i = 0; i < n * c * hw; ++i) {
    const int64_t ch = (i / hw) % c;
    y[i] = y[i] * w[ch] + b[ch];
  }
  EXPECT_TRUE(AllClose(out.As<float>(0), y, 1e-5, 1e-5));
  EXPECT_TRUE(AllClose(out.As<float>(1), mean, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(2), rstd, 1e-5, 0));
}

// Fewer groups than threads to keep busy, each a whole feature map (as
// GroupNorm(1, C) at batch 1): the statistics are summed in chunks by every
// thread. Values far from 0 check that the variance stays two-pass exact.
TEST(GroupNormTest, OneLargeGroupPerSampleSplitAcrossThreads) {
  for (int64_t groups : {1, 2}) {
    const int64_t n = 1, c = 64, h = 56, w = 57, hw = h * w;
    auto x = RandomFloats(n * c * hw, 11, -1, 1);
    for (float& v : x) v += 1000.0f;
    const auto wt = RandomFloats(c, 12), b = RandomFloats(c, 13);
    OpTester t("aten.native_group_norm.default");
    t.AddArg(t.Input(F32({n, c, h, w}), x));
    t.AddArg(t.Constant(F32({c}), wt));
    t.AddArg(t.Constant(F32({c}), b));
    for (int64_t v : {n, c, hw, groups}) t.AddArg(IntArg(v));
    t.AddArg(FloatArg(1e-5));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    std::vector<double> y, mean, rstd;
    ReferenceNorm(x, n * groups, (c / groups) * hw, 1e-5, &y, &mean, &rstd);
    for (int64_t i = 0; i < n * c * hw; ++i) {
      const int64_t ch = (i / hw) % c;
      y[i] = y[i] * wt[ch] + b[ch];
    }
    // y = x * scale + shift in float cancels two terms near 1700 (as
    // ATen's kernel does): absolute errors up to ~1e-4.
    EXPECT_TRUE(AllClose(out.As<float>(0), y, 1e-4, 1e-4)) << "groups=" << groups;
    EXPECT_TRUE(AllClose(out.As<float>(1), mean, 1e-6, 0)) << "groups=" << groups;
    EXPECT_TRUE(AllClose(out.As<float>(2), rstd, 1e-5, 0)) << "groups=" << groups;
  }
}

// kiln.group_norm_nhwc against the plain reference of the same values
// transposed: groups of one channel, of several, one group of all; with
// and without an affine; a map large enough to be summed in chunks by
// every thread, values far from 0 for the two-pass variance.
TEST(GroupNormNhwcTest, MatchesThePlainGroupNorm) {
  struct Case {
    int64_t n, h, w, c, groups;
    bool affine;
  };
  for (const Case& k : {Case{2, 5, 7, 12, 3, true}, Case{1, 4, 4, 8, 8, false},
                        Case{1, 56, 57, 64, 1, true}, Case{2, 40, 40, 48, 4, true},
                        Case{1, 3, 3, 6, 2, false}}) {
    SCOPED_TRACE(::testing::Message() << k.n << "x" << k.h << "x" << k.w << "x" << k.c << " g"
                                    << k.groups);
    const int64_t hw = k.h * k.w;
    auto x_nhwc = RandomFloats(k.n * hw * k.c, 21, -1, 1);
    for (float& v : x_nhwc) v += 100.0f;
    const auto wt = RandomFloats(k.c, 22), b = RandomFloats(k.c, 23);
    // The same values in NCHW order, for the reference.
    std::vector<float> x_nchw(x_nhwc.size());
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < k.c; ++ch)
          x_nchw[(n * k.c + ch) * hw + p] = x_nhwc[(n * hw + p) * k.c + ch];
    std::vector<double> y, mean, rstd;
    ReferenceNorm(x_nchw, k.n * k.groups, (k.c / k.groups) * hw, 1e-5, &y, &mean, &rstd);
    std::vector<double> want(y.size());
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < k.c; ++ch) {
          double v = y[(n * k.c + ch) * hw + p];
          if (k.affine) v = v * wt[ch] + b[ch];
          want[(n * hw + p) * k.c + ch] = v;
        }
    OpTester t("kiln.group_norm_nhwc");
    t.AddArg(t.Input(F32({k.n, k.h, k.w, k.c}), x_nhwc));
    t.AddArg(k.affine ? t.Constant(F32({k.c}), wt) : NoneArg());
    t.AddArg(k.affine ? t.Constant(F32({k.c}), b) : NoneArg());
    for (int64_t v : {k.n, k.c, hw, k.groups}) t.AddArg(IntArg(v));
    t.AddArg(FloatArg(1e-5));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_EQ(t.output_metas().size(), 1u);
    EXPECT_EQ(t.output_metas()[0], F32({k.n, k.h, k.w, k.c}));
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-4, 1e-4));
  }
}

TEST(GroupNormNhwcTest, RejectsSizesThatDisagreeWithInput) {
  OpTester t("kiln.group_norm_nhwc");
  t.AddArg(t.Input(F32({1, 2, 2, 6}), RandomFloats(24, 1)));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  for (int64_t v : {1, 4, 6, 2}) t.AddArg(IntArg(v));  // C = 4: the last dim is 6
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "does not match"));
}

TEST(GroupNormTest, RejectsChannelsNotDivisibleByGroups) {
  OpTester t("aten.native_group_norm.default");
  t.AddArg(t.Input(F32({1, 6, 2}), RandomFloats(12, 1)));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  for (int64_t v : {1, 6, 2, 4}) t.AddArg(IntArg(v));
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "not divisible"));
}

TEST(GroupNormTest, RejectsSizesThatDisagreeWithInput) {
  OpTester t("aten.native_group_norm.default");
  t.AddArg(t.Input(F32({1, 6, 2}), RandomFloats(12, 1)));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  for (int64_t v : {1, 6, 3, 2}) t.AddArg(IntArg(v));
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "does not match"));
}

}  // namespace
}  // namespace kiln::runtime::testing
