// Tests aten.bmm.default against a double-precision batched matmul.
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct BmmCase {
  int64_t b, m, k, n;
};

class BmmTest : public ::testing::TestWithParam<BmmCase> {};

TEST_P(BmmTest, MatchesReference) {
  const BmmCase& c = GetParam();
  const auto a = RandomFloats(c.b * c.m * c.k, 71);
  const auto w = RandomFloats(c.b * c.k * c.n, 72);
  OpTester t("aten.bmm.default");
  t.SetArgs({t.Input(F32({c.b, c.m, c.k}), a), t.Input(F32({c.b, c.k, c.n}), w)});
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
                                           BmmCase{0, 2, 3, 4}));

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

}  // namespace
}  // namespace kiln::runtime::testing
