// Tests aten.slice_scatter.default: the slice (with step, negative and
// clamped bounds) replaced by src, everything else copied from self; and
// aten.select_scatter.default, one index of a dim replaced.
#include <tuple>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct ScatterCase {
  std::vector<int64_t> shape;
  int64_t dim;
  int64_t start, end, step;
  // Expected indices along dim that src fills.
  std::vector<int64_t> picked;
};

class SliceScatterTest : public ::testing::TestWithParam<ScatterCase> {};

TEST_P(SliceScatterTest, MatchesReference) {
  const ScatterCase& c = GetParam();
  const int rank = static_cast<int>(c.shape.size());
  const int dim = static_cast<int>(c.dim < 0 ? c.dim + rank : c.dim);
  std::vector<int64_t> src_shape = c.shape;
  src_shape[dim] = static_cast<int64_t>(c.picked.size());
  const auto self = RandomFloats(NumElements(c.shape), 41);
  const auto src = RandomFloats(NumElements(src_shape), 42);
  OpTester t("aten.slice_scatter.default");
  t.SetArgs({t.Input(F32(c.shape), self), t.Input(F32(src_shape), src),
             IntArg(c.dim), IntArg(c.start), IntArg(c.end), IntArg(c.step)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.shape));
  ASSERT_TRUE(t.Run().ok());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= c.shape[d];
  for (int d = dim + 1; d < rank; ++d) inner *= c.shape[d];
  const int64_t n = c.shape[dim], m = src_shape[dim];
  std::vector<double> expected = ToDouble(self);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < m; ++j) {
      for (int64_t k = 0; k < inner; ++k) {
        expected[(o * n + c.picked[j]) * inner + k] = src[(o * m + j) * inner + k];
      }
    }
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Bounds, SliceScatterTest,
    ::testing::Values(
        ScatterCase{{56, 56}, 0, 0, -7, 1, [] {
                      std::vector<int64_t> v;
                      for (int i = 0; i < 49; ++i) v.push_back(i);
                      return v;
                    }()},
        ScatterCase{{4, 10}, 1, -3, INT64_MAX, 1, {7, 8, 9}},  // swin's tail
        ScatterCase{{2, 9, 3}, 1, 1, 8, 3, {1, 4, 7}},         // step
        ScatterCase{{2, 5}, -1, -100, 2, 1, {0, 1}},           // clamped start
        ScatterCase{{3, 4}, 0, 2, 1, 1, {}}));                 // empty

TEST(SliceScatterTest, SliceScatterRejectsSrcOfWrongShape) {
  OpTester t("aten.slice_scatter.default");
  t.SetArgs({t.Input(F32({4, 6}), RandomFloats(24, 1)),
             t.Input(F32({4, 3}), RandomFloats(12, 2)), IntArg(1), IntArg(0),
             IntArg(2)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must have the slice's shape [4,2]"));
}

TEST(SliceScatterTest, SliceScatterRejectsZeroStep) {
  OpTester t("aten.slice_scatter.default");
  t.SetArgs({t.Input(F32({4}), RandomFloats(4, 1)),
             t.Input(F32({4}), RandomFloats(4, 2)), IntArg(0), IntArg(0),
             IntArg(4), IntArg(0)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "step must be positive"));
}

TEST(SelectScatterTest, ReplacesOneIndexOfADim) {
  // Longformer's window edge: self [3, 4, 5], the last index of dim 1
  // (written -1); then dim 0 written positive.
  const auto self = RandomFloats(60, 43);
  const auto src = RandomFloats(15, 44);
  for (const auto& [dim, index, picked] :
       {std::tuple<int64_t, int64_t, int64_t>{1, -1, 3}, {0, 2, 2}}) {
    std::vector<int64_t> src_shape = {3, 4, 5};
    src_shape.erase(src_shape.begin() + dim);
    const int64_t n = NumElements(src_shape);
    OpTester t("aten.select_scatter.default");
    t.SetArgs({t.Input(F32({3, 4, 5}), self),
               t.Input(F32(src_shape), std::vector<float>(src.begin(), src.begin() + n)),
               IntArg(dim), IntArg(index)});
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32({3, 4, 5}));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected = ToDouble(self);
    const int64_t outer = dim == 0 ? 1 : 3, size = dim == 0 ? 3 : 4, inner = dim == 0 ? 20 : 5;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < inner; ++k) {
        expected[(o * size + picked) * inner + k] = src[o * inner + k];
      }
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0)) << "dim " << dim;
  }
}

TEST(SelectScatterTest, RejectsAnIndexOutOfRangeAndSrcOfWrongShape) {
  OpTester range("aten.select_scatter.default");
  range.SetArgs({range.Input(F32({2, 3}), RandomFloats(6, 1)),
                 range.Input(F32({2}), RandomFloats(2, 2)), IntArg(1), IntArg(3)});
  EXPECT_TRUE(IsInvalidArgument(range.Prepare(), "out of range"));
  OpTester shape("aten.select_scatter.default");
  shape.SetArgs({shape.Input(F32({2, 3}), RandomFloats(6, 1)),
                 shape.Input(F32({3}), RandomFloats(3, 2)), IntArg(1), IntArg(0)});
  EXPECT_TRUE(IsInvalidArgument(shape.Prepare(), "must have the shape"));
}

}  // namespace
}  // namespace kiln::runtime::testing
