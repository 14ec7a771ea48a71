// kiln.interleave_channels against index arithmetic done here: the
// channels of a and b alternate, then the split sizes cut them.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(InterleaveChannelsTest, AlternatesChannelsAndSplitsThem) {
  // 29 channels each: the 8-wide loop and its tail; pieces of 18 and 40.
  const std::vector<int64_t> shape = {2, 3, 2, 29};
  const int64_t pixels = 2 * 3 * 2, c = 29;
  const auto a = RandomFloats(pixels * c, 1), b = RandomFloats(pixels * c, 2);
  OpTester t("kiln.interleave_channels");
  t.AddArg(t.Input(F32(shape), a));
  t.AddArg(t.Input(F32(shape), b));
  t.AddArg(IntListArg({18, 40}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 2u);
  EXPECT_EQ(t.output_metas()[0], F32({2, 3, 2, 18}));
  EXPECT_EQ(t.output_metas()[1], F32({2, 3, 2, 40}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want0, want1;
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t k = 0; k < 2 * c; ++k) {
      const float v = (k % 2 == 0 ? a : b)[p * c + k / 2];
      (k < 18 ? want0 : want1).push_back(v);
    }
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want0, 0, 0));
  EXPECT_TRUE(AllClose(t.OutputF32(1), want1, 0, 0));
}

TEST(InterleaveChannelsTest, RejectsOddOrShortSplitsAndUnequalShapes) {
  auto prepare = [](std::vector<int64_t> b_shape, std::vector<int64_t> sizes) {
    OpTester t("kiln.interleave_channels");
    t.AddArg(t.Input(F32({1, 2, 2, 4}), RandomFloats(16, 1)));
    t.AddArg(t.Input(F32(b_shape), RandomFloats(NumElements(b_shape), 2)));
    t.AddArg(IntListArg(sizes));
    return t.Prepare().code();
  };
  EXPECT_EQ(prepare({1, 2, 2, 4}, {4, 4}), absl::StatusCode::kOk);
  EXPECT_EQ(prepare({1, 2, 2, 4}, {3, 5}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prepare({1, 2, 2, 4}, {4, 2}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prepare({1, 2, 2, 2}, {4, 4}), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime::testing
