// Tests aten.cumsum.default (cumsum.cc) against running sums done here:
// result dtypes as in ATen, any dim, and sums in ATen's order.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(CumsumTest, BoolMaskAlongLastDimGivesI64Positions) {
  // Position ids from an attention mask: mask.cumsum(-1).
  OpTester t("aten.cumsum.default");
  t.AddArg(BoolInput(t, {2, 4}, {1, 1, 0, 1, 0, 1, 1, 1}));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{1, 2, 2, 3, 0, 1, 2, 3}));
}

TEST(CumsumTest, I64AlongAMiddleDim) {
  OpTester t("aten.cumsum.default");
  std::vector<int64_t> x(2 * 3 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int64_t>(i) - 5;
  t.AddArg(I64Input(t, {2, 3, 2}, x));
  t.AddArg(IntArg(1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<int64_t> want(x.size());
  for (int o = 0; o < 2; ++o) {
    for (int i = 0; i < 2; ++i) {
      int64_t sum = 0;
      for (int k = 0; k < 3; ++k) {
        sum += x[o * 6 + k * 2 + i];
        want[o * 6 + k * 2 + i] = sum;
      }
    }
  }
  EXPECT_EQ(t.OutputI64(0), want);
}

TEST(CumsumTest, F32SumsInOrderAndDTypeArgumentConverts) {
  const auto x = RandomFloats(3 * 50, 4);
  OpTester t("aten.cumsum.default");
  t.AddArg(t.Input(F32({3, 50}), x));
  t.AddArg(IntArg(1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3, 50}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want(x.size());
  for (int r = 0; r < 3; ++r) {
    float sum = 0;
    for (int k = 0; k < 50; ++k) want[r * 50 + k] = sum += x[r * 50 + k];
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));  // same order: bit-exact

  OpTester u("aten.cumsum.default");
  u.AddArg(I64Input(u, {3}, {1, 2, 3}));
  u.AddArg(IntArg(0));
  u.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(u.Prepare().ok()) << u.Prepare();
  EXPECT_EQ(u.output_metas()[0], F32({3}));
  ASSERT_TRUE(u.Run().ok());
  EXPECT_TRUE(AllClose(u.OutputF32(0), {1, 3, 6}, 0, 0));
}

TEST(CumsumTest, RejectsABadDimAndBoolResults) {
  OpTester t("aten.cumsum.default");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  t.AddArg(IntArg(3));
  EXPECT_FALSE(t.Prepare().ok());
  OpTester u("aten.cumsum.default");
  u.AddArg(I64Input(u, {2}, {1, 2}));
  u.AddArg(IntArg(0));
  u.AddKwarg("dtype", DTypeArg(DType::kBool));
  EXPECT_EQ(u.Prepare().code(), absl::StatusCode::kUnimplemented);
}

// cumprod: running products along a dim, f32 against a double reference
// and i64 exactly.
TEST(CumprodTest, RunningProductsAlongADim) {
  const auto x = RandomFloats(12, 41, 0.5, 1.5);
  OpTester t("aten.cumprod.default");
  t.AddArg(t.Input(F32({3, 4}), x));
  t.AddArg(IntArg(0));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want(12);
  for (int j = 0; j < 4; ++j) {
    double p = 1;
    for (int i = 0; i < 3; ++i) want[i * 4 + j] = p *= x[i * 4 + j];
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 0));

  OpTester i("aten.cumprod.default");
  i.AddArg(I64Input(i, {4}, {2, -3, 4, 0}));
  i.AddArg(IntArg(-1));
  ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
  ASSERT_TRUE(i.Run().ok());
  EXPECT_EQ(i.OutputI64(0), (std::vector<int64_t>{2, -6, -24, 0}));
}

TEST(CumsumTest, I32GivesI64) {
  OpTester t("aten.cumsum.default");
  t.AddArg(I32Input(t, {2, 3}, {1, 0, 1, 2147483647, 1, 0}));
  t.AddArg(IntArg(1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{1, 1, 2, 2147483647, 2147483648, 2147483648}));
}

}  // namespace
}  // namespace kiln::runtime::testing
