// Tests aten.embedding (embedding.cc), aten.gather and aten.index.Tensor
// (index.cc) against lookups done here, including out-of-range indices.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(EmbeddingTest, LooksUpRows) {
  OpTester t("aten.embedding.default");
  const auto w = RandomFloats(5 * 3, 1);
  t.AddArg(t.Constant(F32({5, 3}), w));
  t.AddArg(I64Input(t, {2, 2}, {4, 0, 0, 2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 2, 3}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int64_t i : {4, 0, 0, 2}) {
    for (int c = 0; c < 3; ++c) want.push_back(w[i * 3 + c]);
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

TEST(EmbeddingTest, OutOfRangeIndexFailsTheRun) {
  OpTester t("aten.embedding.default");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(I64Input(t, {2}, {1, 2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EmbeddingTest, RejectsNonMatrixWeight) {
  OpTester t("aten.embedding.default");
  t.AddArg(t.Input(F32({6}), RandomFloats(6, 1)));
  t.AddArg(I64Input(t, {1}, {0}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "2-D"));
}

TEST(GatherTest, GathersAlongDimWithNegativeIndices) {
  OpTester t("aten.gather.default");
  t.AddArg(I64Input(t, {2, 4}, {10, 11, 12, 13, 20, 21, 22, 23}));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, {2, 3}, {3, 0, -1, 1, 1, 2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{13, 10, 13, 21, 21, 22}));
}

TEST(GatherTest, TakesI32IndicesAndAnyEmptyIndex) {
  OpTester t("aten.gather.default");
  t.AddArg(t.Input(F32({2, 3}), {1, 2, 3, 4, 5, 6}));
  t.AddArg(IntArg(0));
  t.AddArg(I32Input(t, {1, 3}, {1, 0, -1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {4, 2, 6}, 0, 0));

  OpTester e("aten.gather.default");
  e.AddArg(e.Input(F32({2, 3}), {1, 2, 3, 4, 5, 6}));
  e.AddArg(IntArg(1));
  const uint8_t none = 0;
  e.AddArg(e.RawInput(TensorMeta{DType::kU8, {2, 0}}, &none, 0));
  ASSERT_TRUE(e.Prepare().ok()) << e.Prepare();
  EXPECT_EQ(e.output_metas()[0], F32({2, 0}));
  ASSERT_TRUE(e.Run().ok());

  OpTester r("aten.gather.default");  // an empty index of another rank
  r.AddArg(r.Input(F32({5}), {1, 2, 3, 4, 5}));
  r.AddArg(IntArg(0));
  r.AddArg(r.RawInput(TensorMeta{DType::kU8, {2, 0}}, &none, 0));
  ASSERT_TRUE(r.Prepare().ok()) << r.Prepare();
  EXPECT_EQ(r.output_metas()[0], F32({2, 0}));

  OpTester u("aten.gather.default");
  u.AddArg(u.Input(F32({2}), {1, 2}));
  u.AddArg(IntArg(0));
  const uint8_t one = 1;
  u.AddArg(u.RawInput(TensorMeta{DType::kU8, {1}}, &one, 1));
  EXPECT_TRUE(IsInvalidArgument(u.Prepare(), "i64"));
}

TEST(GatherTest, RowsOfOneIndexAndOfManyMatchElementByElement) {
  // self [2, 5, 3, 6], dim 1; index [2, 4, 2, 5] (smaller than self
  // outside dim 1): some rows along the last dim repeat one index (copied
  // whole), others mix indices, negative ones among them.
  const std::vector<int64_t> ss = {2, 5, 3, 6}, is = {2, 4, 2, 5};
  const auto self = RandomFloats(2 * 5 * 3 * 6, 3);
  std::vector<int64_t> index(2 * 4 * 2 * 5);
  for (size_t r = 0; r < index.size() / 5; ++r) {
    for (int64_t j = 0; j < 5; ++j) {
      index[r * 5 + j] = r % 3 == 0 ? static_cast<int64_t>(r % 5) - 2
                                    : static_cast<int64_t>((r * 7 + j * 3) % 10) - 5;
    }
  }
  OpTester t("aten.gather.default");
  t.AddArg(t.Input(F32(ss), self));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, is, index));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t d = 0; d < 5; ++d) {
          int64_t v = index[((a * 4 + b) * 2 + c) * 5 + d];
          if (v < 0) v += 5;
          want.push_back(self[((a * 5 + v) * 3 + c) * 6 + d]);
        }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

TEST(GatherTest, OutOfRangeIndexFailsTheRun) {
  OpTester t("aten.gather.default");
  t.AddArg(t.Input(F32({1, 2}), {1, 2}));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, {1, 1}, {2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GatherTest, RejectsRankMismatch) {
  OpTester t("aten.gather.default");
  t.AddArg(t.Input(F32({1, 2}), {1, 2}));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, {1}, {0}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "rank"));
}

TEST(IndexTest, BroadcastIndicesOverLeadingDims) {
  // BERT's mask: mask[b_idx [B,1,1,1], s_idx [1,1,1,S]] -> [B,1,1,S].
  OpTester t("aten.index.Tensor");
  t.AddArg(BoolInput(t, {2, 3}, {1, 1, 0, 1, 0, 0}));
  t.AddArg(ListArg({I64Input(t, {2, 1, 1, 1}, {0, 1}),
                    I64Input(t, {1, 1, 1, 3}, {0, 1, 2})}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], Bool({2, 1, 1, 3}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 1, 0, 1, 0, 0}));
}

TEST(IndexTest, NoneLeadingDimsForNearestUpsampling) {
  // x[:, :, h_idx [H2, 1], w_idx [W2]] -> [N, C, H2, W2].
  OpTester t("aten.index.Tensor");
  const std::vector<int64_t> shape = {1, 2, 2, 3};
  const auto x = RandomFloats(NumElements(shape), 5);
  t.AddArg(t.Input(F32(shape), x));
  const std::vector<int64_t> h = {0, 0, 1, 1}, w = {0, 0, 1, 1, 2, -1};
  t.AddArg(ListArg({NoneArg(), NoneArg(), I64Input(t, {4, 1}, h),
                    I64Input(t, {6}, w)}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({1, 2, 4, 6}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 6; ++j) {
        const int64_t wj = w[j] < 0 ? w[j] + 3 : w[j];
        want.push_back(x[Ravel({0, c, h[i], wj}, shape)]);
      }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
}

TEST(IndexTest, TrailingDimsAreCopiedWhole) {
  OpTester t("aten.index.Tensor");
  const auto x = RandomFloats(3 * 4, 2);
  t.AddArg(t.Input(F32({3, 4}), x));
  t.AddArg(ListArg({I64Input(t, {2}, {2, 0})}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0),
                       {x[8], x[9], x[10], x[11], x[0], x[1], x[2], x[3]}, 0, 0));
}

TEST(IndexTest, OutOfRangeIndexFailsTheRun) {
  OpTester t("aten.index.Tensor");
  t.AddArg(t.Input(F32({3}), {1, 2, 3}));
  t.AddArg(ListArg({I64Input(t, {1}, {-4})}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexTest, SeparatedIndexedDimsAreUnimplemented) {
  OpTester t("aten.index.Tensor");
  t.AddArg(t.Input(F32({2, 2, 2}), RandomFloats(8, 1)));
  t.AddArg(ListArg({I64Input(t, {1}, {0}), NoneArg(), I64Input(t, {1}, {1})}));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(IndexTest, BoolMaskIndicesAreUnimplemented) {
  OpTester t("aten.index.Tensor");
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(ListArg({BoolInput(t, {2}, {1, 0})}));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime::testing
