// Tests aten.full_like.default: shape from self, dtype from the kwarg or
// self, values in f32, i64 and bool.
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(FullLikeTest, FillsSelfShapeWithSelfDType) {
  OpTester t("aten.full_like.default");
  t.SetArgs({t.Input(F32({2, 3, 4}), RandomFloats(24, 1)), FloatArg(-2.5)});
  t.AddKwarg("memory_format", MemoryFormatArg(3));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), std::vector<double>(24, -2.5), 0, 0));
}

TEST(FullLikeTest, DTypeKwargSelectsI64AndBool) {
  {
    OpTester t("aten.full_like.default");
    t.SetArgs({t.Input(F32({5}), RandomFloats(5, 1)), IntArg(7)});
    t.AddKwarg("dtype", DTypeArg(DType::kI64));
    ASSERT_TRUE(t.Prepare().ok());
    EXPECT_EQ(t.output_metas()[0], (TensorMeta{DType::kI64, {5}}));
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputI64(0), std::vector<int64_t>(5, 7));
  }
  {
    OpTester t("aten.full_like.default");
    t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), BoolArg(true)});
    t.AddKwarg("dtype", DTypeArg(DType::kBool));
    ASSERT_TRUE(t.Prepare().ok());
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputBool(0), std::vector<uint8_t>(3, 1));
  }
}

TEST(FullLikeTest, FullLikeRefusesUnsupportedDType) {
  OpTester t("aten.full_like.default");
  t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), FloatArg(1.0)});
  t.AddKwarg("dtype", DTypeArg(DType::kF16));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(FullLikeTest, FullLikeRejectsNonNumberFill) {
  OpTester t("aten.full_like.default");
  t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), StringArg("x")});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be a number"));
}

}  // namespace
}  // namespace kiln::runtime::testing
