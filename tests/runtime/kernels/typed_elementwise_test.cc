// Tests the dtype-generic elementwise ops (binary_math.cc,
// compare_select.cc): promotion between f32, i64, bool and Python numbers,
// broadcasting, and refusals.
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(AddTensorTest, I64PlusIntScalarStaysI64) {
  OpTester t("aten.add.Tensor");
  t.AddArg(I64Input(t, {4}, {0, 1, 2, 3}));
  t.AddArg(IntArg(7));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{7, 8, 9, 10}));
}

TEST(AddTensorTest, I64WithAlphaBroadcasts) {
  OpTester t("aten.add.Tensor");
  t.AddArg(I64Input(t, {2, 1}, {10, 20}));
  t.AddArg(I64Input(t, {3}, {1, 2, 3}));
  t.AddKwarg("alpha", IntArg(-2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{8, 6, 4, 18, 16, 14}));
}

TEST(AddTensorTest, I64PlusF32PromotesToF32) {
  OpTester t("aten.add.Tensor");
  t.AddArg(I64Input(t, {3}, {1, -2, 1 << 20}));
  t.AddArg(t.Input(F32({}), {0.5f}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1.5, -1.5, (1 << 20) + 0.5}, 0, 0));
}

TEST(AddTensorTest, I64PlusFloatScalarPromotesToF32) {
  OpTester t("aten.add.Tensor");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  t.AddArg(FloatArg(0.25));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1.25, 2.25}, 0, 0));
}

TEST(AddTensorTest, RejectsFloatAlphaForIntegers) {
  OpTester t("aten.add.Tensor");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  t.AddArg(IntArg(1));
  t.AddKwarg("alpha", FloatArg(0.5));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "float alpha"));
}

TEST(SubTensorTest, I64MinusI64WithAlphaBroadcasts) {
  // Mask arithmetic: positions - offsets.
  OpTester t("aten.sub.Tensor");
  t.AddArg(I64Input(t, {2, 1}, {10, 20}));
  t.AddArg(I64Input(t, {3}, {1, 2, 3}));
  t.AddKwarg("alpha", IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{8, 6, 4, 18, 16, 14}));
}

TEST(SubTensorTest, I64MinusFloatScalarPromotesAndBoolIsRefused) {
  OpTester t("aten.sub.Tensor");
  t.AddArg(I64Input(t, {2}, {1, 2}));
  t.AddArg(FloatArg(0.5));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {0.5, 1.5}, 0, 0));
  OpTester u("aten.sub.Tensor");
  u.AddArg(BoolInput(u, {2}, {1, 0}));
  u.AddArg(BoolInput(u, {2}, {1, 1}));
  EXPECT_EQ(u.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(CompareTensorTest, I64TensorsBroadcast) {
  // aten.le.Tensor and friends on i64: causal masks from position ids.
  const std::vector<int64_t> a = {0, 1, 2}, b = {1, 2};
  struct Case {
    const char* op;
    bool (*want)(int64_t, int64_t);
  };
  const Case cases[] = {
      {"aten.le.Tensor", [](int64_t x, int64_t y) { return x <= y; }},
      {"aten.lt.Tensor", [](int64_t x, int64_t y) { return x < y; }},
      {"aten.ge.Tensor", [](int64_t x, int64_t y) { return x >= y; }},
      {"aten.gt.Tensor", [](int64_t x, int64_t y) { return x > y; }},
      {"aten.ne.Tensor", [](int64_t x, int64_t y) { return x != y; }},
  };
  for (const Case& c : cases) {
    OpTester t(c.op);
    t.AddArg(I64Input(t, {3, 1}, a));
    t.AddArg(I64Input(t, {2}, b));
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], Bool({3, 2})) << c.op;
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok()) << c.op;
    std::vector<int> want;
    for (int64_t x : a) {
      for (int64_t y : b) want.push_back(c.want(x, y) ? 1 : 0);
    }
    EXPECT_EQ(out.Bools(0), want) << c.op;
  }
}

TEST(BitwiseAndTest, BoolMasksBroadcast) {
  OpTester t("aten.bitwise_and.Tensor");
  t.AddArg(BoolInput(t, {2, 1}, {1, 0}));
  t.AddArg(BoolInput(t, {1, 3}, {1, 0, 1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], Bool({2, 3}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 0, 1, 0, 0, 0}));
}

TEST(BitwiseAndTest, I64IsBitwise) {
  OpTester t("aten.bitwise_and.Tensor");
  t.AddArg(I64Input(t, {2}, {6, -1}));
  t.AddArg(I64Input(t, {2}, {3, 12}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), (std::vector<int64_t>{2, 12}));
}

TEST(BitwiseAndTest, RejectsFloatOperands) {
  OpTester t("aten.bitwise_and.Tensor");
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(BoolInput(t, {2}, {1, 1}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "floating-point"));
}

struct CompareCase {
  const char* op;
  std::vector<int> want;  // for x = {-1, 0, 1, 2} against 1
};

class CompareScalarTest : public ::testing::TestWithParam<CompareCase> {};

TEST_P(CompareScalarTest, I64AndF32AgainstIntScalar) {
  const CompareCase& c = GetParam();
  {
    OpTester t(c.op);
    t.AddArg(I64Input(t, {4}, {-1, 0, 1, 2}));
    t.AddArg(IntArg(1));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], Bool({4}));
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_EQ(out.Bools(0), c.want) << c.op << " i64";
  }
  {
    OpTester t(c.op);
    t.AddArg(t.Input(F32({2, 2}), {-1, 0, 1, 2}));
    t.AddArg(IntArg(1));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_EQ(out.Bools(0), c.want) << c.op << " f32";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, CompareScalarTest,
    ::testing::Values(CompareCase{"aten.eq.Scalar", {0, 0, 1, 0}},
                      CompareCase{"aten.ne.Scalar", {1, 1, 0, 1}},
                      CompareCase{"aten.lt.Scalar", {1, 1, 0, 0}},
                      CompareCase{"aten.le.Scalar", {1, 1, 1, 0}},
                      CompareCase{"aten.gt.Scalar", {0, 0, 0, 1}},
                      CompareCase{"aten.ge.Scalar", {0, 0, 1, 1}}));

TEST(CompareTest, I64AgainstFractionalScalarComparesAsFloat) {
  OpTester t("aten.ge.Scalar");
  t.AddArg(I64Input(t, {3}, {0, 1, 2}));
  t.AddArg(FloatArg(0.5));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{0, 1, 1}));
}

TEST(CompareTest, EqTensorBroadcastsAndHandlesNaN) {
  OpTester t("aten.eq.Tensor");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  t.AddArg(t.Input(F32({2, 2}), {1, nan, 3, 4}));
  t.AddArg(t.Input(F32({2}), {1, nan}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 0, 0, 0}));
}

TEST(LogicalNotTest, AllDTypes) {
  {
    OpTester t("aten.logical_not.default");
    t.AddArg(BoolInput(t, {3}, {1, 0, 1}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_EQ(out.Bools(0), (std::vector<int>{0, 1, 0}));
  }
  {
    OpTester t("aten.logical_not.default");
    t.AddArg(t.Input(F32({3}), {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN()}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 0, 0}));  // NaN is truthy
  }
}

TEST(WhereTest, MaskWithScalarTensorsMakesAdditiveMask) {
  // BERT: where(mask[B,1,L,S], tensor(0.), tensor(-inf)).
  OpTester t("aten.where.self");
  t.AddArg(BoolInput(t, {1, 1, 2, 3}, {1, 1, 0, 1, 0, 0}));
  t.AddArg(t.Input(F32({}), {0.0f}));
  t.AddArg(t.Input(F32({}), {-std::numeric_limits<float>::infinity()}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({1, 1, 2, 3}));
  ASSERT_TRUE(t.Run().ok());
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<float> got = t.OutputF32(0);
  const std::vector<double> want = {0, 0, -inf, 0, -inf, -inf};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << i;
}

TEST(WhereTest, BroadcastsAllThreeAndPromotes) {
  OpTester t("aten.where.self");
  t.AddArg(BoolInput(t, {2, 1}, {1, 0}));
  t.AddArg(I64Input(t, {3}, {1, 2, 3}));
  t.AddArg(t.Input(F32({2, 3}), {10, 20, 30, 40, 50, 60}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {1, 2, 3, 40, 50, 60}, 0, 0));
}

TEST(WhereTest, RejectsNonBoolCondition) {
  OpTester t("aten.where.self");
  t.AddArg(t.Input(F32({2}), {1, 0}));
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(t.Input(F32({2}), {3, 4}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "condition must be a bool"));
}

TEST(WhereTest, RejectsUnbroadcastableShapes) {
  OpTester t("aten.where.self");
  t.AddArg(BoolInput(t, {3}, {1, 0, 1}));
  t.AddArg(t.Input(F32({2}), {1, 2}));
  t.AddArg(t.Input(F32({}), {3}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "not broadcastable"));
}

// i32 operands take ATen's result type: a number or a 0-d tensor keeps an
// i32 tensor's type, an i64 tensor widens it, a float number makes f32.
TEST(TypedArithTest, I32ResultTypes) {
  struct Case {
    const char* op;
    bool other_tensor;
    DType other_dtype;
    std::vector<int64_t> other_shape;
    DType want;
  };
  for (const Case& c : {Case{"aten.mul.Tensor", true, DType::kI32, {3}, DType::kI32},
                        Case{"aten.mul.Tensor", false, DType::kI64, {}, DType::kI32},
                        Case{"aten.add.Tensor", true, DType::kI64, {}, DType::kI32},
                        Case{"aten.add.Tensor", true, DType::kI64, {3}, DType::kI64},
                        Case{"aten.sub.Tensor", false, DType::kF32, {}, DType::kF32}}) {
    OpTester t(c.op);
    t.AddArg(I32Input(t, {3}, {4, -5, 2147483647}));
    if (!c.other_tensor) {
      t.AddArg(c.other_dtype == DType::kF32 ? FloatArg(0.5) : IntArg(3));
    } else if (c.other_dtype == DType::kI32) {
      t.AddArg(I32Input(t, c.other_shape, {1, 0, 2}));
    } else {
      t.AddArg(I64Input(t, c.other_shape, std::vector<int64_t>(c.other_shape.empty() ? 1 : 3, 3)));
    }
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0].dtype, c.want) << c.op;
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    if (c.want == DType::kI32) {
      const std::vector<int32_t> got = out.As<int32_t>(0);
      if (std::string(c.op) == "aten.mul.Tensor" && c.other_tensor) {
        EXPECT_EQ(got, (std::vector<int32_t>{4, 0, -2}));  // wraps, as ATen's int32
      } else if (std::string(c.op) == "aten.mul.Tensor") {
        EXPECT_EQ(got, (std::vector<int32_t>{12, -15, 2147483645}));
      } else {
        EXPECT_EQ(got, (std::vector<int32_t>{7, -2, -2147483646}));
      }
    } else if (c.want == DType::kI64) {
      EXPECT_EQ(out.As<int64_t>(0), (std::vector<int64_t>{7, -2, 2147483650}));
    } else {
      EXPECT_TRUE(AllClose(out.As<float>(0), {3.5, -5.5, 2147483647.0 - 0.5}, 1e-7, 0));
    }
  }
}

}  // namespace
}  // namespace kiln::runtime::testing
