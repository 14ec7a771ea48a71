// Tests aten._to_copy (cast.cc) and the literal-made tensors of factory.cc
// (arange.start_step, full, scalar_tensor) against values written here.
#include <climits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(ToCopyTest, FloatToI64TruncatesTowardZero) {
  OpTester t("aten._to_copy.default");
  t.AddArg(t.Input(F32({5}), {1.9f, -1.9f, 0.0f, 31.5f, -0.2f}));
  t.AddKwarg("dtype", DTypeArg(DType::kI64));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({5}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{1, -1, 0, 31, 0}));
}

TEST(ToCopyTest, I64ToBoolAndBoolToF32) {
  OpTester t("aten._to_copy.default");
  t.AddArg(I64Input(t, {4}, {0, 1, -7, 0}));
  t.AddKwarg("dtype", DTypeArg(DType::kBool));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{0, 1, 1, 0}));

  OpTester u("aten._to_copy.default");
  u.AddArg(BoolInput(u, {3}, {1, 0, 1}));
  u.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(u.Prepare().ok()) << u.Prepare();
  ASSERT_TRUE(u.Run().ok());
  EXPECT_TRUE(AllClose(u.OutputF32(0), {1, 0, 1}, 0, 0));
}

TEST(ToCopyTest, I64ToF32RoundsToNearest) {
  OpTester t("aten._to_copy.default");
  t.AddArg(I64Input(t, {2}, {(int64_t{1} << 24) + 1, -3}));
  t.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {16777216.0, -3.0}, 0, 0));
}

TEST(ToCopyTest, WithoutDTypeCopies) {
  OpTester t("aten._to_copy.default");
  t.AddArg(t.Input(F32({2}), {1.5f, -2.5f}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1.5, -2.5}, 0, 0));
}

TEST(ToCopyTest, RejectsUnsupportedTargetDType) {
  OpTester t("aten._to_copy.default");
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddKwarg("dtype", DTypeArg(DType::kF16));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

// i32 from and to every type: floats truncate (out of range gives
// INT32_MIN, as x86's conversion does), i64 wraps.
TEST(ToCopyTest, I32FromAndToEveryType) {
  OpTester f("aten._to_copy.default");
  f.AddArg(f.Input(F32({4}), {2.9f, -2.9f, 3e9f, -0.5f}));
  f.AddKwarg("dtype", DTypeArg(DType::kI32));
  ASSERT_TRUE(f.Prepare().ok()) << f.Prepare();
  EXPECT_EQ(f.output_metas()[0], I32({4}));
  Outputs fo(f);
  ASSERT_TRUE(fo.Run(f).ok());
  EXPECT_EQ(fo.As<int32_t>(0), (std::vector<int32_t>{2, -2, INT32_MIN, 0}));

  OpTester w("aten._to_copy.default");
  w.AddArg(I64Input(w, {2}, {(int64_t{1} << 32) + 5, -1}));
  w.AddKwarg("dtype", DTypeArg(DType::kI32));
  ASSERT_TRUE(w.Prepare().ok()) << w.Prepare();
  Outputs wo(w);
  ASSERT_TRUE(wo.Run(w).ok());
  EXPECT_EQ(wo.As<int32_t>(0), (std::vector<int32_t>{5, -1}));

  OpTester b("aten._to_copy.default");
  b.AddArg(I32Input(b, {3}, {-4, 0, 7}));
  b.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(b.Prepare().ok()) << b.Prepare();
  ASSERT_TRUE(b.Run().ok());
  EXPECT_TRUE(AllClose(b.OutputF32(0), {-4, 0, 7}, 0, 0));
}

TEST(ArangeTest, IntegerBoundsGiveI64) {
  OpTester t("aten.arange.start_step");
  t.SetArgs({IntArg(2), IntArg(11), IntArg(3)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{2, 5, 8}));
}

TEST(ArangeTest, NegativeStepAndEmptyRange) {
  OpTester t("aten.arange.start_step");
  t.SetArgs({IntArg(3), IntArg(-2), IntArg(-2)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{3, 1, -1}));

  OpTester u("aten.arange.start_step");
  u.SetArgs({IntArg(0), IntArg(0)});
  ASSERT_TRUE(u.Prepare().ok()) << u.Prepare();
  EXPECT_EQ(u.output_metas()[0], I64({0}));
}

TEST(ArangeTest, F32DTypeForTimestepFrequencies) {
  OpTester t("aten.arange.start_step");
  t.SetArgs({IntArg(0), IntArg(4)});
  t.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {0, 1, 2, 3}, 0, 0));
}

TEST(ArangeTest, FloatBoundsGiveCeilLength) {
  OpTester t("aten.arange.start_step");
  t.SetArgs({FloatArg(0.0), FloatArg(1.0), FloatArg(0.3)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {0.0, 0.3, 0.6, 0.9}, 1e-6, 0));
}

TEST(ArangeTest, RejectsZeroStep) {
  OpTester t("aten.arange.start_step");
  t.SetArgs({IntArg(0), IntArg(4), IntArg(0)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "nonzero"));
}

TEST(FullTest, InfersDTypeFromFillValue) {
  OpTester t("aten.full.default");
  t.SetArgs({IntListArg({}), BoolArg(true)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], Bool({}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{1}));

  OpTester u("aten.full.default");
  u.SetArgs({IntListArg({2, 2}), FloatArg(-0.5)});
  ASSERT_TRUE(u.Prepare().ok()) << u.Prepare();
  EXPECT_EQ(u.output_metas()[0], F32({2, 2}));
  ASSERT_TRUE(u.Run().ok());
  EXPECT_TRUE(AllClose(u.OutputF32(0), {-0.5, -0.5, -0.5, -0.5}, 0, 0));
}

// empty's values are undefined in ATen; the daemon's are zeros of the
// dtype asked for (f32 by default).
TEST(EmptyTest, GivesZerosOfTheDType) {
  OpTester t("aten.empty.memory_format");
  t.SetArgs({IntListArg({2, 3})});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), std::vector<double>(6, 0.0), 0, 0));

  OpTester u("aten.empty.memory_format");
  u.SetArgs({IntListArg({2})});
  u.AddKwarg("dtype", DTypeArg(DType::kI64));
  ASSERT_TRUE(u.Prepare().ok()) << u.Prepare();
  ASSERT_TRUE(u.Run().ok());
  EXPECT_EQ(u.OutputI64(0), (std::vector<int64_t>{0, 0}));

  OpTester n("aten.empty.memory_format");
  n.SetArgs({IntListArg({-2})});
  EXPECT_TRUE(IsInvalidArgument(n.Prepare(), "negative size"));
}

TEST(FullTest, ExplicitDTypeConverts) {
  OpTester t("aten.full.default");
  t.SetArgs({IntListArg({3}), FloatArg(2.7)});
  t.AddKwarg("dtype", DTypeArg(DType::kI64));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{2, 2, 2}));
}

TEST(FullTest, RejectsNegativeSize) {
  OpTester t("aten.full.default");
  t.SetArgs({IntListArg({2, -1}), FloatArg(0)});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "negative size"));
}

TEST(ScalarTensorTest, DefaultsToF32) {
  OpTester t("aten.scalar_tensor.default");
  t.SetArgs({FloatArg(-std::numeric_limits<double>::infinity())});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputF32(0)[0], -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace kiln::runtime::testing
