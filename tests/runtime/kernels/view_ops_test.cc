// Tests the dtype-generic view copies (expand, unsqueeze, slice, select,
// alias) against index arithmetic done here.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(ExpandTest, BroadcastsSingletonAndNewLeadingDims) {
  OpTester t("aten.expand.default");
  t.AddArg(t.Input(F32({3, 1}), {1, 2, 3}));
  t.AddArg(IntListArg({2, -1, 4}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3, 4}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) want.push_back(i + 1);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

TEST(ExpandTest, ExpandsBoolMasks) {
  OpTester t("aten.expand.default");
  t.AddArg(BoolInput(t, {1, 1, 2}, {1, 0}));
  t.AddArg(IntListArg({2, -1, 2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 0, 1, 0}));
}

TEST(ExpandTest, RejectsNonSingletonDim) {
  OpTester t("aten.expand.default");
  t.AddArg(t.Input(F32({3, 2}), Iota(6)));
  t.AddArg(IntListArg({3, 4}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "cannot expand"));
}

TEST(ExpandTest, RejectsFewerSizesThanRank) {
  OpTester t("aten.expand.default");
  t.AddArg(t.Input(F32({3, 2}), Iota(6)));
  t.AddArg(IntListArg({6}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "at least the rank"));
}

TEST(UnsqueezeTest, NegativeDimAppends) {
  OpTester t("aten.unsqueeze.default");
  t.AddArg(I64Input(t, {2, 3}, {1, 2, 3, 4, 5, 6}));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 3, 1}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(UnsqueezeTest, RejectsOutOfRangeDim) {
  OpTester t("aten.unsqueeze.default");
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(IntArg(3));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "out of range"));
}

struct SliceCase {
  std::vector<int64_t> shape;
  int64_t dim, start, end, step;
};

class SliceTest : public ::testing::TestWithParam<SliceCase> {};

TEST_P(SliceTest, MatchesClampedReference) {
  const SliceCase& c = GetParam();
  const int64_t n = NumElements(c.shape);
  OpTester t("aten.slice.Tensor");
  t.AddArg(t.Input(F32(c.shape), Iota(n)));
  t.AddArg(IntArg(c.dim));
  t.AddArg(IntArg(c.start));
  t.AddArg(IntArg(c.end));
  t.AddArg(IntArg(c.step));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  const int rank = static_cast<int>(c.shape.size());
  const int dim = c.dim < 0 ? c.dim + rank : c.dim;
  const int64_t size = c.shape[dim];
  int64_t start = c.start < 0 ? c.start + size : c.start;
  int64_t end = c.end < 0 ? c.end + size : c.end;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  std::vector<int64_t> out_shape = c.shape;
  out_shape[dim] = (end - start + c.step - 1) / c.step;
  ASSERT_EQ(t.output_metas()[0], F32(out_shape));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int64_t i = 0; i < NumElements(out_shape); ++i) {
    std::vector<int64_t> idx = Unravel(i, out_shape);
    idx[dim] = start + idx[dim] * c.step;
    want.push_back(static_cast<double>(Ravel(idx, c.shape)));
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SliceTest,
    ::testing::Values(SliceCase{{2, 8, 64}, 2, 0, 32, 1},          // rotary half
                      SliceCase{{2, 8, 64}, -1, 32, INT64_MAX, 1},  // to the end
                      SliceCase{{5, 7}, 0, -3, -1, 1},              // negative
                      SliceCase{{5, 7}, 1, 1, 100, 3},              // step, clamp
                      SliceCase{{4, 3}, 0, 3, 1, 1}));              // empty

TEST(SliceTest, RejectsNonPositiveStep) {
  OpTester t("aten.slice.Tensor");
  t.SetArgs({t.Input(F32({4}), Iota(4)), IntArg(0), IntArg(0), IntArg(4),
             IntArg(0)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "step must be positive"));
}

TEST(SelectTest, NegativeIndexCountsFromTheEnd) {
  OpTester t("aten.select.int");
  t.AddArg(t.Input(F32({2, 3, 4}), Iota(24)));
  t.AddArg(IntArg(1));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {8, 9, 10, 11, 20, 21, 22, 23}, 0, 0));
}

TEST(SelectTest, RejectsOutOfRangeIndex) {
  OpTester t("aten.select.int");
  t.AddArg(t.Input(F32({2, 3}), Iota(6)));
  t.AddArg(IntArg(1));
  t.AddArg(IntArg(3));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "out of range"));
}

TEST(AliasTest, AliasAndLiftFreshCopyCopyValues) {
  for (const char* op : {"aten.alias.default", "aten.lift_fresh_copy.default"}) {
    OpTester t(op);
    t.AddArg(t.Input(F32({2, 2}), {1, -2, 3, -4}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    EXPECT_TRUE(AllClose(t.OutputF32(0), {1, -2, 3, -4}, 0, 0)) << op;
  }
}

TEST(AliasTest, EmptyTensorIsFine) {
  OpTester t("aten.alias.default");
  t.AddArg(t.Input(F32({0}), {}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({0}));
  EXPECT_TRUE(t.Run().ok());
}

}  // namespace
}  // namespace kiln::runtime::testing
