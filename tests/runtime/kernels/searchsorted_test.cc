// Tests aten.searchsorted.Tensor and aten.bucketize.Tensor
// (searchsorted.cc) against std::lower_bound / std::upper_bound done here,
// and ATen's placement of NaN.
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(SearchsortedTest, OneSequenceForAllValuesLeftAndRight) {
  const std::vector<float> seq = {-1, 0.5f, 0.5f, 2, 7};
  const std::vector<float> values = {-3, 0.5f, 1, 7, 9, 2, -1, 0.25f};
  for (bool right : {false, true}) {
    OpTester t("aten.searchsorted.Tensor");
    t.AddArg(t.Input(F32({5}), seq));
    t.AddArg(t.Input(F32({2, 4}), values));
    t.AddKwarg("right", BoolArg(right));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], I64({2, 4}));
    ASSERT_TRUE(t.Run().ok());
    std::vector<int64_t> want;
    for (float v : values) {
      want.push_back(right ? std::upper_bound(seq.begin(), seq.end(), v) - seq.begin()
                           : std::lower_bound(seq.begin(), seq.end(), v) - seq.begin());
    }
    EXPECT_EQ(t.OutputI64(0), want) << "right=" << right;
  }
}

TEST(SearchsortedTest, RowsSideSorterAndInt32) {
  // Row 0 sorted; row 1 given unsorted with its sorter.
  OpTester t("aten.searchsorted.Tensor");
  t.AddArg(I64Input(t, {2, 3}, {1, 3, 5, 30, 10, 20}));
  t.AddArg(I64Input(t, {2, 2}, {3, 6, 20, 0}));
  t.AddKwarg("side", StringArg("right"));
  t.AddKwarg("sorter", I64Input(t, {2, 3}, {0, 1, 2, 1, 2, 0}));
  t.AddKwarg("out_int32", BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I32({2, 2}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.As<int32_t>(0), (std::vector<int32_t>{2, 3, 2, 0}));
}

TEST(SearchsortedTest, NaNGoesWhereATenPutsIt) {
  // ATen: searchsorted([1, 2, 2, nan], [2, nan, 0, 5]) = [1, 4, 0, 4];
  // with right=True, [4, 4, 0, 4].
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool right : {false, true}) {
    OpTester t("aten.searchsorted.Tensor");
    t.AddArg(t.Input(F32({4}), {1, 2, 2, nan}));
    t.AddArg(t.Input(F32({4}), {2, nan, 0, 5}));
    t.AddKwarg("right", BoolArg(right));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputI64(0), right ? (std::vector<int64_t>{4, 4, 0, 4})
                                    : (std::vector<int64_t>{1, 4, 0, 4}));
  }
}

TEST(SearchsortedTest, ScalarValueGivesAZeroDimIndex) {
  OpTester t("aten.searchsorted.Scalar");
  t.AddArg(t.Input(F32({4}), {1, 2, 2, 3}));
  t.AddArg(FloatArg(2.0));
  t.AddKwarg("right", BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{3}));

  OpTester i("aten.searchsorted.Scalar");
  i.AddArg(I64Input(i, {3}, {int64_t{1} << 60, (int64_t{1} << 60) + 1, (int64_t{1} << 60) + 2}));
  i.AddArg(IntArg((int64_t{1} << 60) + 1));
  ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
  ASSERT_TRUE(i.Run().ok());
  EXPECT_EQ(i.OutputI64(0), (std::vector<int64_t>{1}));  // exact, not through a double

  OpTester f("aten.searchsorted.Scalar");
  f.AddArg(I64Input(f, {2}, {1, 2}));
  f.AddArg(FloatArg(1.5));
  EXPECT_EQ(f.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(SearchsortedTest, BucketizeSwapsTheArguments) {
  OpTester t("aten.bucketize.Tensor");
  t.AddArg(t.Input(F32({3}), {0.5f, 1, 4}));
  t.AddArg(t.Input(F32({3}), {1, 2, 3}));
  t.AddKwarg("right", BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{0, 1, 3}));
  // An f32 reference for AllClose's sake: the values pass through unchanged.
  EXPECT_TRUE(AllClose({0.5f, 1, 4}, {0.5, 1, 4}, 0, 0));
}

TEST(SearchsortedTest, RejectsBadSorterShapesAndSides) {
  OpTester range("aten.searchsorted.Tensor");
  range.AddArg(range.Input(F32({3}), {1, 2, 3}));
  range.AddArg(range.Input(F32({1}), {2}));
  range.AddKwarg("sorter", I64Input(range, {3}, {0, 3, 1}));
  ASSERT_TRUE(range.Prepare().ok()) << range.Prepare();
  EXPECT_EQ(range.Run().code(), absl::StatusCode::kInvalidArgument);

  OpTester shape("aten.searchsorted.Tensor");
  shape.AddArg(shape.Input(F32({2, 3}), {1, 2, 3, 4, 5, 6}));
  shape.AddArg(shape.Input(F32({3, 1}), {2, 3, 4}));
  EXPECT_TRUE(IsInvalidArgument(shape.Prepare(), "all but the last dim"));

  OpTester side("aten.searchsorted.Tensor");
  side.AddArg(side.Input(F32({3}), {1, 2, 3}));
  side.AddArg(side.Input(F32({1}), {2}));
  side.AddKwarg("side", StringArg("middle"));
  EXPECT_TRUE(IsInvalidArgument(side.Prepare(), "side"));

  OpTester dtypes("aten.searchsorted.Tensor");
  dtypes.AddArg(dtypes.Input(F32({3}), {1, 2, 3}));
  dtypes.AddArg(I64Input(dtypes, {1}, {2}));
  EXPECT_EQ(dtypes.Prepare().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime::testing
