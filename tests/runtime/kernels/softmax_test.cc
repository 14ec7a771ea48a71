// Tests aten._softmax.default, aten._safe_softmax.default and
// aten._log_softmax.default over every dim layout (last dim, middle dims with inner blocks, wide inner) against a
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

// `target` (_softmax, or _safe_softmax with no -inf line) over the case
// against the reference; `half_to_float`: the op takes that argument.
void CheckSoftmax(const SoftmaxCase& c, const char* target, bool half_to_float, uint32_t seed) {
  // Large values: softmax must subtract the max to avoid overflow.
  const auto x = RandomFloats(NumElements(c.shape), seed, -50.0f, 100.0f);
  OpTester t(target);
  std::vector<Arg> args = {t.Input(F32(c.shape), x), IntArg(c.dim)};
  if (half_to_float) args.push_back(BoolArg(false));
  t.SetArgs(args);
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

TEST_P(SoftmaxTest, MatchesReference) {
  CheckSoftmax(GetParam(), "aten._softmax.default", /*half_to_float=*/true, 31);
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

TEST_P(SoftmaxTest, SafeSoftmaxMatchesReference) {
  CheckSoftmax(GetParam(), "aten._safe_softmax.default", /*half_to_float=*/false, 33);
}

// A line of -inf alone gives zeros (every key masked); a line with a NaN
// among its -infs keeps softmax's NaN, as the decomposition's
// where(all(x == -inf)) does. Along the last dim (one row at a time) and
// along the first of [3, 2] and [3, 70] (columns in blocks).
TEST(SafeSoftmaxTest, LinesOfMinusInfinityGiveZeros) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t inner : {1, 2, 70}) {
    SCOPED_TRACE(inner);
    // Lines: all -inf; -inf but one 0 (then 1 there); -inf and a NaN.
    const std::vector<std::vector<float>> lines = {
        {-inf, -inf, -inf}, {-inf, 0.0f, -inf}, {-inf, nan, -inf}};
    std::vector<float> x;
    std::vector<int64_t> shape;
    int64_t dim = 0;
    if (inner == 1) {  // [3 lines, 3]
      for (const auto& l : lines) x.insert(x.end(), l.begin(), l.end());
      shape = {3, 3};
      dim = 1;
    } else {  // [3, inner]: column j is line j % 3
      shape = {3, inner};
      x.resize(3 * inner);
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < inner; ++j) x[i * inner + j] = lines[j % 3][i];
      }
    }
    OpTester t("aten._safe_softmax.default");
    t.SetArgs({t.Input(F32(shape), x), IntArg(dim)});
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    const auto y = t.OutputF32(0);
    for (int64_t line = 0; line < (inner == 1 ? 3 : inner); ++line) {
      for (int64_t i = 0; i < 3; ++i) {
        const float v = inner == 1 ? y[line * 3 + i] : y[i * inner + line];
        switch (line % 3) {
          case 0: EXPECT_EQ(v, 0.0f) << line << "," << i; break;
          case 1: EXPECT_EQ(v, i == 1 ? 1.0f : 0.0f) << line << "," << i; break;
          default: EXPECT_TRUE(std::isnan(v)) << line << "," << i; break;
        }
      }
    }
  }
}

TEST(SafeSoftmaxTest, OtherResultDTypesAreUnimplemented) {
  OpTester t("aten._safe_softmax.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntArg(1), DTypeArg(DType::kF64)});
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented) << t.Prepare();
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
