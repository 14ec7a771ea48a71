// Tests aten.bmm.default against a double-precision batched matmul.
#include "runtime/kernels/onednn_util.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct BmmCase {
  int64_t b, m, k, n;
  bool constant_mat2 = false;  // a weight: batch 1 runs as a matrix product
};

class BmmTest : public ::testing::TestWithParam<BmmCase> {};

TEST_P(BmmTest, MatchesReference) {
  const BmmCase& c = GetParam();
  const auto a = RandomFloats(c.b * c.m * c.k, 71);
  const auto w = RandomFloats(c.b * c.k * c.n, 72);
  OpTester t("aten.bmm.default");
  t.SetArgs({t.Input(F32({c.b, c.m, c.k}), a), c.constant_mat2
                                                   ? t.Constant(F32({c.b, c.k, c.n}), w)
                                                   : t.Input(F32({c.b, c.k, c.n}), w)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({c.b, c.m, c.n}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected(c.b * c.m * c.n, 0.0);
  for (int64_t p = 0; p < c.b; ++p) {
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < c.k; ++q) {
          s += static_cast<double>(a[(p * c.m + i) * c.k + q]) * w[(p * c.k + q) * c.n + j];
        }
        expected[(p * c.m + i) * c.n + j] = s;
      }
    }
  }
  // Float accumulation over k terms of magnitude <= 1.
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-5, 1e-5 * c.k));
}

INSTANTIATE_TEST_SUITE_P(Shapes, BmmTest,
                         ::testing::Values(BmmCase{192, 49, 32, 49},  // swin q@k^T
                                           BmmCase{192, 49, 49, 32},  // attn@v
                                           BmmCase{1, 1, 1, 1},
                                           BmmCase{3, 5, 0, 4},       // k = 0: zeros
                                           BmmCase{0, 2, 3, 4},
                                           // XLNet's einsums with a weight:
                                           // few rows, many rows, a last
                                           // partial strip of 16 columns.
                                           BmmCase{1, 5, 64, 96, true},
                                           BmmCase{1, 37, 64, 96, true},
                                           BmmCase{1, 300, 48, 20, true},
                                           BmmCase{2, 7, 8, 9, true}));

TEST(BmmTest, BmmRejectsMismatchedInnerDims) {
  OpTester t("aten.bmm.default");
  t.SetArgs({t.Input(F32({2, 3, 4}), RandomFloats(24, 1)),
             t.Input(F32({2, 5, 6}), RandomFloats(60, 2))});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "do not match"));
}

TEST(BmmTest, BmmRejectsNon3dInputs) {
  OpTester t("aten.bmm.default");
  t.SetArgs({t.Input(F32({3, 4}), RandomFloats(12, 1)),
             t.Input(F32({4, 5}), RandomFloats(20, 2))});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "3-D"));
}

TEST(BmmTest, Bf16PrecisionIsWithinBf16ToleranceButNotF32Exact) {
  CompileOptions bf16;
  bf16.precision = Precision::kBf16;
  if (ComputeType(bf16) != dnnl::memory::data_type::bf16) {
    GTEST_SKIP() << "this CPU has no native bf16 dot products; bf16 runs in f32";
  }
  const int64_t b = 4, m = 8, k = 64, n = 16;
  const auto x = RandomFloats(b * m * k, 31);
  const auto w = RandomFloats(b * k * n, 32);
  auto run = [&](const CompileOptions& options) {
    OpTester t("aten.bmm.default");
    t.SetOptions(options);
    t.SetArgs({t.Input(F32({b, m, k}), x), t.Input(F32({b, k, n}), w)});
    EXPECT_TRUE(t.Prepare().ok());
    EXPECT_TRUE(t.Run().ok());
    return t.OutputF32(0);
  };
  const std::vector<float> f32 = run(CompileOptions()), lowp = run(bf16);
  double err = 0, scale = 0;
  for (size_t i = 0; i < f32.size(); ++i) {
    err = std::max(err, static_cast<double>(std::abs(lowp[i] - f32[i])));
    scale = std::max(scale, static_cast<double>(std::abs(f32[i])));
  }
  EXPECT_LT(err / scale, 1e-2);
  EXPECT_GT(err / scale, 1e-4);
}

}  // namespace
}  // namespace kiln::runtime::testing
