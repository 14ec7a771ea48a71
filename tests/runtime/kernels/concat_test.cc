// Tests aten.cat.default and aten.split_with_sizes.default against index
// arithmetic done here.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(CatTest, JoinsAlongNegativeDim) {
  OpTester t("aten.cat.default");
  const auto a = RandomFloats(2 * 3 * 2, 1), b = RandomFloats(2 * 3 * 4, 2);
  t.AddArg(ListArg({t.Input(F32({2, 3, 2}), a), t.Input(F32({2, 3, 4}), b)}));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3, 6}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int r = 0; r < 6; ++r) {
    for (int j = 0; j < 2; ++j) want.push_back(a[r * 2 + j]);
    for (int j = 0; j < 4; ++j) want.push_back(b[r * 4 + j]);
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

TEST(CatTest, JoinsAlongDimZeroByDefault) {
  OpTester t("aten.cat.default");
  t.AddArg(ListArg({I64Input(t, {1, 2}, {1, 2}), I64Input(t, {2, 2}, {3, 4, 5, 6})}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({3, 2}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(CatTest, SkipsLegacyEmptyOneDimTensors) {
  // An empty KV cache is a float tensor of shape [0] concatenated with
  // [B, H, S, D] keys.
  OpTester t("aten.cat.default");
  const auto k = RandomFloats(1 * 2 * 3 * 4, 3);
  t.AddArg(ListArg({t.Input(F32({0}), {}), t.Input(F32({1, 2, 3, 4}), k)}));
  t.AddArg(IntArg(-2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({1, 2, 3, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), ToDouble(k), 0, 0));
}

TEST(CatTest, RejectsMismatchedSizes) {
  OpTester t("aten.cat.default");
  t.AddArg(ListArg({t.Input(F32({2, 3}), RandomFloats(6, 1)),
                    t.Input(F32({3, 3}), RandomFloats(9, 2))}));
  t.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must match except"));
}

TEST(SplitWithSizesTest, SplitsLastDim) {
  OpTester t("aten.split_with_sizes.default");
  const auto x = RandomFloats(2 * 6, 4);
  t.AddArg(t.Input(F32({2, 6}), x));
  t.AddArg(IntListArg({2, 0, 4}));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 3u);
  EXPECT_EQ(t.output_metas()[0], F32({2, 2}));
  EXPECT_EQ(t.output_metas()[1], F32({2, 0}));
  EXPECT_EQ(t.output_metas()[2], F32({2, 4}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_TRUE(AllClose(out.As<float>(0), {x[0], x[1], x[6], x[7]}, 0, 0));
  EXPECT_TRUE(AllClose(out.As<float>(2),
                       {x[2], x[3], x[4], x[5], x[8], x[9], x[10], x[11]}, 0, 0));
}

TEST(SplitWithSizesTest, RejectsSizesNotSummingToDim) {
  OpTester t("aten.split_with_sizes.default");
  t.AddArg(t.Input(F32({2, 6}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({2, 3}));
  t.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must sum"));
}

}  // namespace
}  // namespace kiln::runtime::testing
