// Tests inference batch norm (aten.native_batch_norm.default with
// training=False and aten._native_batch_norm_legit_no_training.default)
// against a double-precision reference computed here.
#include <cmath>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct BnData {
  std::vector<float> x, w, b, mean, var;
};

BnData MakeData(const std::vector<int64_t>& shape, uint32_t seed) {
  const int64_t c = shape[1];
  BnData d;
  d.x = RandomFloats(NumElements(shape), seed);
  d.w = RandomFloats(c, seed + 1, 0.5f, 1.5f);
  d.b = RandomFloats(c, seed + 2);
  d.mean = RandomFloats(c, seed + 3);
  d.var = RandomFloats(c, seed + 4, 0.1f, 2.0f);
  return d;
}

std::vector<double> ReferenceBn(const std::vector<int64_t>& shape,
                                const BnData& d, bool affine, double eps) {
  const int64_t c = shape[1];
  const int64_t inner = NumElements(shape) / (shape[0] * c);
  std::vector<double> out(d.x.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t ch = (i / inner) % c;
    double y = (d.x[i] - static_cast<double>(d.mean[ch])) /
               std::sqrt(static_cast<double>(d.var[ch]) + eps);
    if (affine) y = y * d.w[ch] + d.b[ch];
    out[i] = y;
  }
  return out;
}

struct BnCase {
  std::vector<int64_t> shape;
  bool legit;           // _native_batch_norm_legit_no_training
  bool affine;          // weight and bias given
  bool constant_params;
};

class BatchNormTest : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormTest, MatchesReference) {
  const BnCase& c = GetParam();
  const int64_t ch = c.shape[1];
  const BnData d = MakeData(c.shape, 10);
  const double eps = 1e-5;
  OpTester t(c.legit ? "aten._native_batch_norm_legit_no_training.default"
                     : "aten.native_batch_norm.default");
  auto param = [&](const std::vector<float>& v) {
    return c.constant_params ? t.Constant(F32({ch}), v)
                             : t.Input(F32({ch}), v);
  };
  t.AddArg(t.Input(F32(c.shape), d.x));
  t.AddArg(c.affine ? param(d.w) : NoneArg());
  t.AddArg(c.affine ? param(d.b) : NoneArg());
  t.AddArg(param(d.mean));
  t.AddArg(param(d.var));
  if (!c.legit) t.AddArg(BoolArg(false));
  t.AddArg(FloatArg(0.1));
  t.AddArg(FloatArg(eps));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 3u);
  EXPECT_EQ(t.output_metas()[0], F32(c.shape));
  EXPECT_EQ(t.output_metas()[1], F32({0}));
  EXPECT_EQ(t.output_metas()[2], F32({0}));
  ASSERT_TRUE(t.Run().ok());
  // A handful of float operations per element.
  EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceBn(c.shape, d, c.affine, eps),
                       1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormTest,
    ::testing::Values(BnCase{{2, 3, 5, 7}, false, true, true},
                      BnCase{{1, 64, 56, 56}, true, true, true},
                      BnCase{{2, 8, 4, 4}, true, true, false},
                      BnCase{{4, 6}, false, true, true},  // BatchNorm1d
                      BnCase{{2, 5, 3}, false, false, true},
                      BnCase{{2, 5, 3, 2, 2}, true, false, false}));

TEST(BatchNormTest, AcceptsKeywordArguments) {
  const std::vector<int64_t> shape = {1, 4, 3, 3};
  const BnData d = MakeData(shape, 20);
  OpTester t("aten._native_batch_norm_legit_no_training.default");
  t.AddArg(t.Input(F32(shape), d.x));
  t.AddKwarg("weight", t.Constant(F32({4}), d.w));
  t.AddKwarg("bias", t.Constant(F32({4}), d.b));
  t.AddKwarg("running_mean", t.Constant(F32({4}), d.mean));
  t.AddKwarg("running_var", t.Constant(F32({4}), d.var));
  t.AddKwarg("momentum", FloatArg(0.1));
  t.AddKwarg("eps", IntArg(1));  // an int where a float is expected
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceBn(shape, d, true, 1.0), 1e-5,
                       1e-5));
}

void AddStandardArgs(OpTester& t, const std::vector<int64_t>& shape,
                     int64_t param_size, bool training) {
  t.AddArg(t.Input(F32(shape), RandomFloats(NumElements(shape), 1)));
  for (int i = 0; i < 4; ++i) {
    t.AddArg(t.Constant(F32({param_size}),
                        RandomFloats(param_size, 2 + i, 0.1f, 1.0f)));
  }
  t.AddArg(BoolArg(training));
  t.AddArg(FloatArg(0.1));
  t.AddArg(FloatArg(1e-5));
}

// training=True with running stats would update them in place in ATen.
TEST(BatchNormTest, BatchNormReportsTrainingWithRunningStatsAsUnimplemented) {
  OpTester t("aten.native_batch_norm.default");
  AddStandardArgs(t, {2, 3, 4, 4}, 3, /*training=*/true);
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

// training=True without running stats (weight standardization): the
// batch's own mean and biased variance per channel, also returned.
TEST(BatchNormTest, TrainingNormalizesWithTheBatchStatistics) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const auto x = RandomFloats(60, 51, -2, 3);
  const auto w = RandomFloats(4, 52, 0.5, 1.5);
  OpTester t("aten.native_batch_norm.default");
  t.AddArg(t.Input(F32(shape), x));
  t.AddArg(t.Constant(F32({4}), w));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(BoolArg(true));
  t.AddArg(FloatArg(0.0));
  t.AddArg(FloatArg(1e-4));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[1], F32({4}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want(60), mean(4), invstd(4);
  for (int c = 0; c < 4; ++c) {
    double s = 0, q = 0;
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < 5; ++k) s += x[(n * 4 + c) * 5 + k];
    mean[c] = s / 15;
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < 5; ++k) q += std::pow(x[(n * 4 + c) * 5 + k] - mean[c], 2);
    invstd[c] = 1 / std::sqrt(q / 15 + 1e-4);
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < 5; ++k) {
        const int i = (n * 4 + c) * 5 + k;
        want[i] = (x[i] - mean[c]) * invstd[c] * w[c];
      }
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(t.OutputF32(1), mean, 1e-6, 1e-7));
  EXPECT_TRUE(AllClose(t.OutputF32(2), invstd, 1e-5, 0));
}

TEST(BatchNormTest, BatchNormRejectsParameterOfWrongSize) {
  OpTester t("aten.native_batch_norm.default");
  AddStandardArgs(t, {2, 3, 4, 4}, 4, /*training=*/false);
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "weight must have shape [3]"));
}

TEST(BatchNormTest, BatchNormRejectsMissingRunningStats) {
  OpTester t("aten.native_batch_norm.default");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(NoneArg());
  t.AddArg(BoolArg(false));
  t.AddArg(FloatArg(0.1));
  t.AddArg(FloatArg(1e-5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "running_mean is required"));
}

TEST(BatchNormTest, BatchNormRejectsRankOneInput) {
  OpTester t("aten.native_batch_norm.default");
  AddStandardArgs(t, {3}, 3, /*training=*/false);
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "rank >= 2"));
}

}  // namespace
}  // namespace kiln::runtime::testing
