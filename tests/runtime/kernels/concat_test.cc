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

// Channels-last rows split into pieces of every width from one element to
// past the short-row path (kShortRowBytes: 256 bytes), in 1-byte and
// 4-byte elements, over enough rows to be split between threads; then
// joined again.
TEST(SplitWithSizesTest, ShortAndLongRowsRoundTrip) {
  const std::vector<int64_t> sizes = {1, 3, 14, 2, 7, 70, 5};  // 70 floats: 280 bytes
  int64_t c = 0;
  for (int64_t s : sizes) c += s;
  const int64_t rows = 3 * 97;
  for (bool bools : {false, true}) {
    SCOPED_TRACE(bools ? "bool" : "float");
    OpTester split("aten.split_with_sizes.default");
    const auto x = RandomFloats(rows * c, 5);
    std::vector<int> bits(x.size());
    for (size_t i = 0; i < x.size(); ++i) bits[i] = x[i] > 0;
    split.AddArg(bools ? BoolInput(split, {3, 97, c}, bits) : split.Input(F32({3, 97, c}), x));
    split.AddArg(IntListArg(sizes));
    split.AddArg(IntArg(2));
    ASSERT_TRUE(split.Prepare().ok()) << split.Prepare();
    Outputs pieces(split);
    ASSERT_TRUE(pieces.Run(split).ok());
    OpTester cat("aten.cat.default");
    std::vector<Arg> parts;
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t w = sizes[k];
      std::vector<float> want_f;
      std::vector<int> want_b;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < w; ++j) {
          want_f.push_back(x[r * c + offset + j]);
          want_b.push_back(bits[r * c + offset + j]);
        }
      }
      if (bools) {
        EXPECT_EQ(pieces.Bools(static_cast<int>(k)), want_b) << "piece " << k;
        parts.push_back(BoolInput(cat, {3, 97, w}, want_b));
      } else {
        EXPECT_EQ(pieces.As<float>(static_cast<int>(k)), want_f) << "piece " << k;
        parts.push_back(cat.Input(F32({3, 97, w}), want_f));
      }
      offset += w;
    }
    cat.AddArg(ListArg(parts));
    cat.AddArg(IntArg(-1));
    ASSERT_TRUE(cat.Prepare().ok()) << cat.Prepare();
    Outputs joined(cat);
    ASSERT_TRUE(joined.Run(cat).ok());
    if (bools) {
      EXPECT_EQ(joined.Bools(0), bits);
    } else {
      EXPECT_EQ(joined.As<float>(0), x);
    }
  }
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
