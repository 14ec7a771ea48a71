// Tests aten.constant_pad_nd.default: padding and cropping of trailing dims
// against an index-by-index reference, on f32 and other dtypes.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct PadCase {
  std::vector<int64_t> shape, pad, out;
  double value;
};

class ConstantPadTest : public ::testing::TestWithParam<PadCase> {};

TEST_P(ConstantPadTest, MatchesReference) {
  const PadCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.shape), 51);
  OpTester t("aten.constant_pad_nd.default");
  t.SetArgs({t.Input(F32(c.shape), x), IntListArg(c.pad), FloatArg(c.value)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.out));
  ASSERT_TRUE(t.Run().ok());
  const int rank = static_cast<int>(c.shape.size());
  std::vector<int64_t> lo(rank, 0);
  for (size_t i = 0; i < c.pad.size() / 2; ++i) lo[rank - 1 - i] = c.pad[2 * i];
  std::vector<double> expected(NumElements(c.out));
  for (int64_t i = 0; i < static_cast<int64_t>(expected.size()); ++i) {
    int64_t rem = i, src = 0, stride = 1;
    bool inside = true;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t o = rem % c.out[d];
      rem /= c.out[d];
      const int64_t in = o - lo[d];
      if (in < 0 || in >= c.shape[d]) inside = false;
      src += in * stride;
      stride *= c.shape[d];
    }
    expected[i] = inside ? x[src] : c.value;
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    PadAndCrop, ConstantPadTest,
    ::testing::Values(
        PadCase{{1, 5, 5, 4}, {0, 0, 0, 2, 0, 2}, {1, 7, 7, 4}, 0.0},  // swin
        PadCase{{1, 56, 56, 96}, {0, 0, 0, 0, 0, 0}, {1, 56, 56, 96}, 0.0},
        PadCase{{2, 3}, {1, 2}, {2, 6}, -1.5},
        PadCase{{2, 3, 4}, {1, 1, 2, 0}, {2, 5, 6}, 3.0},
        PadCase{{2, 6}, {-1, -2}, {2, 3}, 0.0},   // crop
        PadCase{{3, 4}, {2, -3, 0, 1}, {4, 3}, 7.0},  // pad one side, crop other
        PadCase{{2, 3}, {-3, 0}, {2, 0}, 0.0}));      // cropped to empty

TEST(ConstantPadTest, ConstantPadRejectsOddPadLength) {
  OpTester t("aten.constant_pad_nd.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntListArg({1, 2, 3})});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "even length"));
}

TEST(ConstantPadTest, ConstantPadRejectsTooManyDims) {
  OpTester t("aten.constant_pad_nd.default");
  t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), IntListArg({1, 1, 1, 1})});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "pads more dims"));
}

TEST(ConstantPadTest, ConstantPadRejectsNegativeOutputSize) {
  OpTester t("aten.constant_pad_nd.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntListArg({-2, -2})});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "negative size"));
}

}  // namespace
}  // namespace kiln::runtime::testing

namespace kiln::runtime::testing {
namespace {

TEST(ConstantPadTest, OtherDTypesPadWithTheValueCastToThem) {
  // i64 with value 7; c64 (what torch.fft.irfft pads) with value 2 -> (2, 0),
  // cropping one value and padding two.
  OpTester t("aten.constant_pad_nd.default");
  t.AddArg(I64Input(t, {2}, {-1, 5}));
  t.AddArg(IntListArg({1, 0}));
  t.AddArg(FloatArg(7));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{7, -1, 5}));

  OpTester c("aten.constant_pad_nd.default");
  c.AddArg(c.Input(TensorMeta{DType::kC64, {3}}, {1, 2, 3, 4, 5, 6}));
  c.AddArg(IntListArg({-1, 2}));
  c.AddArg(FloatArg(2));
  ASSERT_TRUE(c.Prepare().ok()) << c.Prepare();
  EXPECT_EQ(c.output_metas()[0], (TensorMeta{DType::kC64, {4}}));
  ASSERT_TRUE(c.Run().ok());
  EXPECT_TRUE(AllClose(c.OutputC64(0), {3, 4, 5, 6, 2, 0, 2, 0}, 0, 0));
}

}  // namespace
}  // namespace kiln::runtime::testing
