// Tests aten._softmax.default and aten._log_softmax.default over every dim
// layout (last dim, middle dims with inner blocks, wide inner) against a
// double-precision reference.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

std::vector<double> ReferenceSoftmax(const std::vector<float>& x,
                                     const std::vector<int64_t>& shape,
                                     int dim) {
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d == dim) n = shape[d];
    if (d > dim) inner *= shape[d];
  }
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < inner; ++k) {
      double m = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) m = std::max<double>(m, x[(o * n + i) * inner + k]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[(o * n + i) * inner + k] - m);
      for (int64_t i = 0; i < n; ++i) {
        y[(o * n + i) * inner + k] = std::exp(x[(o * n + i) * inner + k] - m) / sum;
      }
    }
  }
  return y;
}

struct SoftmaxCase {
  std::vector<int64_t> shape;
  int64_t dim;
};

class SoftmaxTest : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxTest, MatchesReference) {
  const SoftmaxCase& c = GetParam();
  // Large values: softmax must subtract the max to avoid overflow.
  const auto x = RandomFloats(NumElements(c.shape), 31, -50.0f, 100.0f);
  OpTester t("aten._softmax.default");
  t.SetArgs({t.Input(F32(c.shape), x), IntArg(c.dim), BoolArg(false)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.shape));
  ASSERT_TRUE(t.Run().ok());
  const int rank = static_cast<int>(c.shape.size());
  const int dim = rank == 0 ? 0 : static_cast<int>(c.dim < 0 ? c.dim + rank : c.dim);
  EXPECT_TRUE(AllClose(t.OutputF32(0),
                       rank == 0 ? std::vector<double>{1.0}
                                 : ReferenceSoftmax(x, c.shape, dim),
                       1e-5, 1e-7));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, SoftmaxTest,
    ::testing::Values(SoftmaxCase{{2, 12, 7, 49}, -1},  // attention rows
                      SoftmaxCase{{4, 10}, 0},          // columns
                      SoftmaxCase{{3, 5, 130}, 1},      // inner > one block
                      SoftmaxCase{{2, 3, 4}, 1},
                      SoftmaxCase{{1}, 0},
                      SoftmaxCase{{}, 0},
                      SoftmaxCase{{0, 5}, -1}));

TEST_P(SoftmaxTest, LogSoftmaxMatchesReference) {
  const SoftmaxCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.shape), 32, -50.0f, 100.0f);
  OpTester t("aten._log_softmax.default");
  t.SetArgs({t.Input(F32(c.shape), x), IntArg(c.dim), BoolArg(false)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const int rank = static_cast<int>(c.shape.size());
  const int dim = rank == 0 ? 0 : static_cast<int>(c.dim < 0 ? c.dim + rank : c.dim);
  std::vector<double> want = rank == 0 ? std::vector<double>{1.0} : ReferenceSoftmax(x, c.shape, dim);
  for (double& v : want) v = std::log(v);
  // Probabilities far below float's range are fine as logs: compare in
  // absolute terms scaled by the inputs' range.
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-5, 1e-4));
}

TEST(SoftmaxTest, RowOfMinusInfinityGivesNaNLikeATen) {
  const float inf = std::numeric_limits<float>::infinity();
  OpTester t("aten._softmax.default");
  t.SetArgs({t.Input(F32({2, 3}), {-inf, -inf, -inf, 0.0f, -inf, 0.0f}),
             IntArg(1), BoolArg(false)});
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  const auto y = t.OutputF32(0);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]) && std::isnan(y[2]));
  EXPECT_TRUE(AllClose({y[3], y[4], y[5]}, {0.5, 0.0, 0.5}, 1e-7, 0));
}

TEST(SoftmaxTest, SoftmaxRejectsHalfToFloatForF32) {
  OpTester t("aten._softmax.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntArg(1), BoolArg(true)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "half_to_float"));
}

TEST(SoftmaxTest, SoftmaxRejectsOutOfRangeDim) {
  OpTester t("aten._softmax.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntArg(2), BoolArg(false)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "out of range"));
}

}  // namespace
}  // namespace kiln::runtime::testing
