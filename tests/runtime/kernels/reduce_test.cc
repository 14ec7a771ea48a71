// Tests aten.mean.dim (dims, negative dims, keepdim, all dims) against a
// double-precision reference computed here.
#include <cmath>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

// Mean over `dims` (already wrapped, may be empty meaning all).
std::vector<double> ReferenceMean(const std::vector<int64_t>& shape,
                                  std::vector<int> dims,
                                  const std::vector<float>& x) {
  const int r = static_cast<int>(shape.size());
  if (dims.empty()) {
    for (int d = 0; d < r; ++d) dims.push_back(d);
  }
  std::vector<bool> red(r, false);
  for (int d : dims) red[d] = true;
  std::vector<int64_t> out_shape;
  int64_t count = 1;
  for (int d = 0; d < r; ++d) {
    if (red[d]) count *= shape[d];
    else out_shape.push_back(shape[d]);
  }
  std::vector<double> sum(NumElements(out_shape), 0.0);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rem = i, o = 0, os = 1;
    for (int d = r - 1; d >= 0; --d) {
      const int64_t idx = rem % shape[d];
      rem /= shape[d];
      if (!red[d]) {
        o += idx * os;
        os *= shape[d];
      }
    }
    sum[o] += x[i];
  }
  for (double& s : sum) s /= static_cast<double>(count);
  return sum;
}

struct MeanCase {
  std::vector<int64_t> shape;
  std::optional<std::vector<int64_t>> dims;  // nullopt: None
  bool keepdim;
  std::vector<int64_t> out;
};

class MeanTest : public ::testing::TestWithParam<MeanCase> {};

TEST_P(MeanTest, MatchesReference) {
  const MeanCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.shape), 17);
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32(c.shape), x));
  t.AddArg(c.dims ? IntListArg(*c.dims) : NoneArg());
  t.AddArg(BoolArg(c.keepdim));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.out));
  ASSERT_TRUE(t.Run().ok());
  std::vector<int> dims;
  if (c.dims) {
    for (int64_t d : *c.dims) {
      if (!c.shape.empty()) {
        dims.push_back(static_cast<int>(d < 0 ? d + c.shape.size() : d));
      }
    }
  }
  if (c.shape.empty()) {
    EXPECT_TRUE(AllClose(t.OutputF32(0), ToDouble(x), 1e-6, 0));
    return;
  }
  EXPECT_TRUE(
      AllClose(t.OutputF32(0), ReferenceMean(c.shape, dims, x), 1e-5, 1e-6));
}

INSTANTIATE_TEST_SUITE_P(
    Dims, MeanTest,
    ::testing::Values(
        // resnet global pool: mean over [-1, -2] keepdim.
        MeanCase{{2, 512, 7, 7}, std::vector<int64_t>{-1, -2}, true,
                 {2, 512, 1, 1}},
        MeanCase{{2, 3, 4, 5}, std::vector<int64_t>{2, 3}, false, {2, 3}},
        MeanCase{{6, 10}, std::vector<int64_t>{0}, false, {10}},  // columns
        MeanCase{{3, 300, 5}, std::vector<int64_t>{1}, true, {3, 1, 5}},
        MeanCase{{2, 3, 4, 5}, std::vector<int64_t>{0, 2}, false, {3, 5}},
        MeanCase{{2, 3, 4, 5}, std::vector<int64_t>{-4, -1}, true,
                 {1, 3, 4, 1}},
        MeanCase{{2, 1, 4}, std::vector<int64_t>{1}, false, {2, 4}},
        MeanCase{{2, 3, 4}, std::nullopt, false, {}},
        MeanCase{{2, 3, 4}, std::vector<int64_t>{}, true, {1, 1, 1}},
        MeanCase{{100000}, std::vector<int64_t>{0}, false, {}},
        // Channels-last global pooling (the layout pass maps dims [2, 3]
        // of NCHW to [1, 2]): C split into column blocks of unequal width,
        // and a C no multiple of 8.
        MeanCase{{2, 9, 9, 100}, std::vector<int64_t>{1, 2}, true, {2, 1, 1, 100}},
        MeanCase{{1, 28, 28, 72}, std::vector<int64_t>{1, 2}, true, {1, 1, 1, 72}},
        MeanCase{{3, 5, 5, 13}, std::vector<int64_t>{1, 2}, true, {3, 1, 1, 13}},
        // NCHW rows shorter than a vector block, and one of odd length.
        MeanCase{{2, 5, 3, 3}, std::vector<int64_t>{2, 3}, true, {2, 5, 1, 1}},
        MeanCase{{1, 2, 37, 41}, std::vector<int64_t>{-1, -2}, false, {1, 2}},
        MeanCase{{}, std::vector<int64_t>{-1}, false, {}}));

// Float partial sums must not cost precision on long reductions: a
// million values near 1 (where a plain float sum drifts by ~1e-4), rows
// and columns.
TEST(MeanTest, LongReductionsKeepFloatPrecision) {
  std::vector<float> x = RandomFloats(1 << 20, 23);
  for (float& v : x) v = 1.f + 0.25f * v;
  for (const auto& [shape, dims] :
       {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{1, 2, 512, 1024}, {2, 3}},
        {{1, 1024, 512, 2}, {1, 2}}}) {
    OpTester t("aten.mean.dim");
    t.AddArg(t.Input(F32(shape), x));
    t.AddArg(IntListArg(dims));
    t.AddArg(BoolArg(true));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<int> d(dims.begin(), dims.end());
    EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceMean(shape, d, x), 2e-7, 0));
  }
}

// aten.mean.default: every element, with the dtype only as a keyword.
TEST(MeanTest, MeanOfEverything) {
  const std::vector<float> x = RandomFloats(60, 24);
  OpTester t("aten.mean.default");
  t.AddArg(t.Input(F32({3, 4, 5}), x));
  t.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({}));
  ASSERT_TRUE(t.Run().ok());
  double sum = 0;
  for (float v : x) sum += v;
  EXPECT_TRUE(AllClose(t.OutputF32(0), {sum / 60}, 1e-6, 1e-7));
}

// The sum of nothing is 0 (the mean of nothing is NaN, below).
TEST(MeanTest, SumOfEmptyDimIsZero) {
  OpTester t("aten.sum.dim_IntList");
  t.AddArg(t.Input(F32({3, 0}), {}));
  t.AddArg(IntListArg({1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {0, 0, 0}, 0, 0));
}

TEST(MeanTest, MeanOfEmptyDimIsNaN) {
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32({3, 0}), {}));
  t.AddArg(IntListArg({1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3}));
  ASSERT_TRUE(t.Run().ok());
  for (float v : t.OutputF32(0)) EXPECT_TRUE(std::isnan(v));
}

TEST(MeanTest, AcceptsSingleIntDimAndF32Dtype) {
  const auto x = RandomFloats(12, 3);
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32({3, 4}), x));
  t.AddArg(IntArg(-1));
  t.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(
      AllClose(t.OutputF32(0), ReferenceMean({3, 4}, {1}, x), 1e-5, 1e-6));
}

TEST(MeanTest, MeanRejectsDimOutOfRange) {
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32({3, 4}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({2}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "dimension 2 is out of range"));
}

TEST(MeanTest, MeanRejectsRepeatedDim) {
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32({3, 4}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({1, -1}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "appears twice"));
}

TEST(MeanTest, MeanReportsOtherDtypeAsUnimplemented) {
  OpTester t("aten.mean.dim");
  t.AddArg(t.Input(F32({3, 4}), RandomFloats(12, 1)));
  t.AddArg(IntListArg({1}));
  t.AddKwarg("dtype", DTypeArg(DType::kF64));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(AnyDimTest, BoolInputOverEveryDimWithKeepdim) {
  // [2, 3, 4] with a few true values.
  std::vector<uint8_t> x(24, 0);
  x[5] = x[13] = x[23] = 1;
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      OpTester t("aten.any.dim");
      t.SetArgs({t.RawInput(TensorMeta{DType::kBool, {2, 3, 4}}, x.data(), 24),
                 IntArg(dim), BoolArg(keepdim)});
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      const int d = static_cast<int>(dim < 0 ? dim + 3 : dim);
      std::vector<int64_t> shape = {2, 3, 4};
      std::vector<int64_t> out_shape = shape;
      out_shape[d] = 1;
      std::vector<uint8_t> expected(24 / shape[d], 0);
      for (int i = 0; i < 24; ++i) {
        int idx[3] = {i / 12, (i / 4) % 3, i % 4};
        idx[d] = 0;
        expected[(idx[0] * out_shape[1] + idx[1]) * out_shape[2] + idx[2]] |= x[i];
      }
      if (!keepdim) out_shape.erase(out_shape.begin() + d);
      EXPECT_EQ(t.output_metas()[0], (TensorMeta{DType::kBool, out_shape}));
      ASSERT_TRUE(t.Run().ok());
      EXPECT_EQ(t.OutputBool(0), expected) << "dim " << dim;
    }
  }
}

TEST(AnyDimTest, F32InputCountsNaNAsTrue) {
  OpTester t("aten.any.dim");
  t.SetArgs({t.Input(F32({3, 2}), {0.0f, 0.0f, NAN, 0.0f, -0.0f, 2.0f}),
             IntArg(1)});
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputBool(0), (std::vector<uint8_t>{0, 1, 1}));
}

TEST(AnyDimTest, AnyDimRejectsI64Input) {
  std::vector<int64_t> x(3, 1);
  OpTester t("aten.any.dim");
  t.SetArgs({t.RawInput(TensorMeta{DType::kI64, {3}}, x.data(), 24), IntArg(0)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be bool or f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
