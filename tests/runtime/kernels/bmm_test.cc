// Tests aten.bmm.default against a double-precision batched matmul.
#include "runtime/kernels/onednn_util.h"
#include "tests/runtime/kernels/kernel_test_util.h"
#include "tests/testing/reference_head_scores.h"

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

namespace kiln::runtime::testing {
namespace {

// kiln.bmm: operands as strided windows of their inputs.
TEST(StridedBmmTest, ReadsTransposedHeadsOfItsInputs) {
  // self: heads of 4 dims interleaved in rows of 8 ([rows, heads * dim]);
  // mat2: the same layout read transposed ([heads, dim, rows]).
  constexpr int64_t kRows = 6, kHeads = 2, kDim = 4;
  const auto q = RandomFloats(kRows * kHeads * kDim, 81);
  const auto k = RandomFloats(kRows * kHeads * kDim, 82);
  OpTester t("kiln.bmm");
  t.SetArgs({t.Input(F32({kRows, kHeads * kDim}), q), t.Input(F32({kRows, kHeads * kDim}), k),
             IntListArg({kHeads, kRows, kDim, kDim, kHeads * kDim, 1, 0}),
             IntListArg({kHeads, kDim, kRows, kDim, 1, kHeads * kDim, 0})});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({kHeads, kRows, kRows}));
  ASSERT_TRUE(t.Run().ok());
  const std::vector<double> expected = ReferenceHeadScores(q, k, kHeads, kRows, kDim);
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-5, 1e-5 * kDim));
}

TEST(StridedBmmTest, Bf16ConvertsTheWindowsNotTheirInputs) {
  CompileOptions bf16;
  bf16.precision = Precision::kBf16;
  if (ComputeType(bf16) != dnnl::memory::data_type::bf16) {
    GTEST_SKIP() << "this CPU has no native bf16 dot products; bf16 runs in f32";
  }
  // Every other row of a [2, 16, 64] input against a dense [2, 64, 8].
  const auto x = RandomFloats(2 * 16 * 64, 41);
  const auto w = RandomFloats(2 * 64 * 8, 42);
  auto run = [&](const CompileOptions& options) {
    OpTester t("kiln.bmm");
    t.SetOptions(options);
    t.SetArgs({t.Input(F32({2, 16, 64}), x), t.Input(F32({2, 64, 8}), w),
               IntListArg({2, 8, 64, 16 * 64, 128, 1, 64}), NoneArg()});
    EXPECT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_TRUE(t.Run().ok());
    return t.OutputF32(0);
  };
  const std::vector<float> lowp = run(bf16);
  std::vector<double> want;
  for (int b = 0; b < 2; ++b)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) {
        double sum = 0;
        for (int e = 0; e < 64; ++e) {
          sum += double{x[b * 16 * 64 + 64 + r * 128 + e]} * w[(b * 64 + e) * 8 + c];
        }
        want.push_back(sum);
      }
  EXPECT_TRUE(AllClose(lowp, want, 2e-2, 0.1));
}

TEST(StridedBmmTest, RefusesAViewReadingPastItsInput) {
  OpTester t("kiln.bmm");
  t.SetArgs({t.Input(F32({2, 3, 4}), RandomFloats(24, 1)),
             t.Input(F32({2, 4, 5}), RandomFloats(40, 2)),
             IntListArg({2, 3, 4, 12, 4, 1, 1}),  // one element too far
             NoneArg()});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "reads past"));
}

TEST(StridedBmmTest, RefusesAStrideBelowOne) {
  OpTester t("kiln.bmm");
  t.SetArgs({t.Input(F32({2, 3, 4}), RandomFloats(24, 1)),
             t.Input(F32({2, 4, 5}), RandomFloats(40, 2)),
             IntListArg({2, 3, 4, 0, 4, 1, 0}), NoneArg()});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "strides >= 1"));
}

}  // namespace
}  // namespace kiln::runtime::testing
