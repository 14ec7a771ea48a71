// Tests aten._to_copy (cast.cc) and the literal-made tensors of factory.cc
// (arange.start_step, full, full_like, empty, scalar_tensor) against values
// written here.
#include <climits>
#include <cmath>
#include <complex>
#include <limits>

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

TEST(ToCopyTest, RejectsAnInvalidDTypeAndOtherDevices) {
  OpTester t("aten._to_copy.default");
  t.AddArg(t.Input(F32({2}), {1, 2}));
  Arg bad = DTypeArg(DType::kF32);
  bad.i = 99;
  t.AddKwarg("dtype", bad);
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kInvalidArgument);
}

// Runs _to_copy of `in` (dtype `from`) to `to` and returns the raw output.
template <typename To, typename From>
std::vector<To> Cast(DType from, const std::vector<From>& in, DType to) {
  OpTester t("aten._to_copy.default");
  t.AddArg(t.RawInput(TensorMeta{from, {static_cast<int64_t>(in.size())}}, in.data(),
                      in.size() * sizeof(From)));
  t.AddKwarg("dtype", DTypeArg(to));
  EXPECT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0].dtype, to);
  Outputs out(t);
  EXPECT_TRUE(out.Run(t).ok());
  return out.As<To>(0);
}

TEST(ToCopyTest, ComplexFromAndToRealKeepsTheRealPart) {
  // A real value v becomes (v, 0); to a real dtype the real part converts
  // (ATen warns that the imaginary part is dropped); to bool either part.
  using C = std::complex<float>;
  EXPECT_EQ((Cast<C, float>(DType::kF32, {1.5f, -2.0f}, DType::kC64)),
            (std::vector<C>{C(1.5f, 0), C(-2.0f, 0)}));
  EXPECT_EQ((Cast<C, int64_t>(DType::kI64, {3, -7}, DType::kC64)),
            (std::vector<C>{C(3, 0), C(-7, 0)}));
  const std::vector<C> z = {C(1.5f, 2), C(-2.7f, 0), C(0, 1), C(0, 0)};
  EXPECT_EQ((Cast<float, C>(DType::kC64, z, DType::kF32)),
            (std::vector<float>{1.5f, -2.7f, 0, 0}));
  EXPECT_EQ((Cast<int64_t, C>(DType::kC64, z, DType::kI64)),
            (std::vector<int64_t>{1, -2, 0, 0}));
  EXPECT_EQ((Cast<uint8_t, C>(DType::kC64, z, DType::kBool)),
            (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ((Cast<C, C>(DType::kC64, z, DType::kC64)), z);
}

// The bit patterns are ATen's (torch 2.14 on x86): round to nearest even,
// overflow to infinity, NaN to 0x7e00 (f16) and 0xffff (bf16).
TEST(ToCopyTest, F32ToBFloat16RoundsToNearestEven) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ((Cast<uint16_t, float>(DType::kF32,
                                   {1.00390625f, 1.01171875f, 3.4e38f, nan, -0.0f, 1e-40f, -2.5f},
                                   DType::kBF16)),
            (std::vector<uint16_t>{0x3f80, 0x3f82, 0x7f80, 0xffff, 0x8000, 0x0001, 0xc020}));
}

TEST(ToCopyTest, F32ToHalfRoundsToNearestEvenWithSubnormals) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::ldexp(1.0f, -25);  // half of f16's smallest subnormal
  EXPECT_EQ((Cast<uint16_t, float>(DType::kF32,
                                   {65520.0f, 65519.0f, 6e-8f, 2e-8f, 1.00048828125f, nan, tiny,
                                    3 * tiny, -1e9f, 6.103515625e-05f, -0.0f},
                                   DType::kF16)),
            (std::vector<uint16_t>{0x7c00, 0x7bff, 0x0001, 0x0000, 0x3c00, 0x7e00, 0x0000,
                                   0x0002, 0xfc00, 0x0400, 0x8000}));
}

TEST(ToCopyTest, HalfAndBFloat16WidenExactly) {
  EXPECT_EQ((Cast<float, uint16_t>(DType::kF16, {0x3c00, 0x0001, 0x7bff, 0xfc00, 0xc500},
                                   DType::kF32)),
            (std::vector<float>{1.0f, std::ldexp(1.0f, -24), 65504.0f,
                                -std::numeric_limits<float>::infinity(), -5.0f}));
  EXPECT_EQ((Cast<float, uint16_t>(DType::kBF16, {0x3f82, 0xc020, 0x0001}, DType::kF32)),
            (std::vector<float>{1.015625f, -2.5f, std::ldexp(1.0f, -133)}));
  // f16 -> bf16 goes through f32: 1 + 2^-10 is below half a bf16 step.
  EXPECT_EQ((Cast<uint16_t, uint16_t>(DType::kF16, {0x3c01, 0x4900}, DType::kBF16)),
            (std::vector<uint16_t>{0x3f80, 0x4120}));
}

// Narrow integers from floats go through i32 (i8, i16) or i64 (u8) and
// wrap, as ATen's casts do on x86; from integers they wrap.
TEST(ToCopyTest, NarrowIntegersWrap) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> f = {200.0f, -200.0f, 300.5f, 1e10f, nan, -3.7f, 70000.0f};
  EXPECT_EQ((Cast<int8_t, float>(DType::kF32, f, DType::kI8)),
            (std::vector<int8_t>{-56, 56, 44, 0, 0, -3, 112}));
  EXPECT_EQ((Cast<uint8_t, float>(DType::kF32, f, DType::kU8)),
            (std::vector<uint8_t>{200, 56, 44, 0, 0, 253, 112}));
  EXPECT_EQ((Cast<int16_t, float>(DType::kF32, f, DType::kI16)),
            (std::vector<int16_t>{200, -200, 300, 0, 0, -3, 4464}));
  EXPECT_EQ((Cast<uint8_t, int64_t>(DType::kI64, {-1, 256 + 7, 255}, DType::kU8)),
            (std::vector<uint8_t>{255, 7, 255}));
  EXPECT_EQ((Cast<int64_t, uint8_t>(DType::kU8, {255, 0, 128}, DType::kI64)),
            (std::vector<int64_t>{255, 0, 128}));
  EXPECT_EQ((Cast<float, int8_t>(DType::kI8, {-128, 5}, DType::kF32)),
            (std::vector<float>{-128.0f, 5.0f}));
}

TEST(ToCopyTest, F64RoundTripsAndNarrows) {
  EXPECT_EQ((Cast<double, float>(DType::kF32, {0.1f, -3.0f}, DType::kF64)),
            (std::vector<double>{static_cast<double>(0.1f), -3.0}));
  EXPECT_EQ((Cast<float, double>(DType::kF64, {0.1, 1e300, -2.5}, DType::kF32)),
            (std::vector<float>{0.1f, std::numeric_limits<float>::infinity(), -2.5f}));
  EXPECT_EQ((Cast<int64_t, double>(DType::kF64, {-2.9, 1e30}, DType::kI64)),
            (std::vector<int64_t>{-2, INT64_MIN}));
  EXPECT_EQ((Cast<uint8_t, double>(DType::kF64, {0.0, -0.5, 2.0}, DType::kBool)),
            (std::vector<uint8_t>{0, 1, 1}));
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

// Values are start + step * i in the dtype's accumulation type (i64 for
// integers, so a float step is truncated first; f32 for the 16-bit floats),
// the length ceil((end - start) / step) in double: ATen's answers.
TEST(ArangeTest, EveryDTypeAccumulatesLikeATen) {
  auto arange = [](double start, double end, double step, DType dtype) {
    OpTester t("aten.arange.start_step");
    t.SetArgs({FloatArg(start), FloatArg(end), FloatArg(step)});
    t.AddKwarg("dtype", DTypeArg(dtype));
    EXPECT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0].dtype, dtype);
    auto out = std::make_unique<Outputs>(t);
    EXPECT_TRUE(out->Run(t).ok());
    return out;
  };
  EXPECT_EQ(arange(0.5, 5, 1.5, DType::kI64)->As<int64_t>(0), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(arange(0, 5, 1.5, DType::kU8)->As<uint8_t>(0), (std::vector<uint8_t>{0, 1, 2, 3}));
  EXPECT_EQ(arange(0.5, 5, 1.5, DType::kI32)->As<int32_t>(0), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(arange(1, 2, 0.25, DType::kF64)->As<double>(0),
            (std::vector<double>{1.0, 1.25, 1.5, 1.75}));
  EXPECT_EQ(arange(0, 3, 1, DType::kF16)->As<uint16_t>(0),
            (std::vector<uint16_t>{0, 15360, 16384}));
  EXPECT_EQ(arange(0.1, 0.5, 0.1, DType::kBF16)->As<uint16_t>(0),
            (std::vector<uint16_t>{15821, 15949, 16026, 16077}));
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

TEST(FullTest, ConvertsTheValueToAnyDType) {
  struct Case {
    Arg value;
    DType dtype;
    uint16_t want;  // the element's low bits
  };
  for (const Case& c : {Case{FloatArg(2.7), DType::kI8, 2}, Case{FloatArg(1.5), DType::kBF16, 16320},
                        Case{IntArg(-1), DType::kU8, 255}, Case{FloatArg(-2.0), DType::kF16, 0xc000},
                        Case{IntArg(40000), DType::kI16, 40000}}) {
    OpTester t("aten.full.default");
    t.SetArgs({IntListArg({2}), c.value});
    t.AddKwarg("dtype", DTypeArg(c.dtype));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], (TensorMeta{c.dtype, {2}}));
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    const std::vector<uint8_t> bytes = out.As<uint8_t>(0);
    uint16_t got = 0;
    std::memcpy(&got, bytes.data(), std::min<size_t>(2, ElementSize(c.dtype)));
    EXPECT_EQ(got, c.want) << DTypeName(c.dtype);
  }
}

TEST(EmptyPermutedTest, GivesZerosAndChecksTheLayout) {
  OpTester t("aten.empty_permuted.default");
  t.SetArgs({IntListArg({2, 3}), IntListArg({1, 0})});
  t.AddKwarg("dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), {0, 0, 0, 0, 0, 0}, 0, 0));

  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{0, 0}, {0}, {0, 2}}) {
    OpTester u("aten.empty_permuted.default");
    u.SetArgs({IntListArg({2, 3}), IntListArg(bad)});
    EXPECT_TRUE(IsInvalidArgument(u.Prepare(), "permutation")) << bad.size();
  }
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

TEST(FullLikeTest, DTypeKwargSelectsF64) {
  OpTester t("aten.full_like.default");
  t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), FloatArg(0.1)});
  t.AddKwarg("dtype", DTypeArg(DType::kF64));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], (TensorMeta{DType::kF64, {3}}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.As<double>(0), std::vector<double>(3, 0.1));
}

TEST(FullLikeTest, FullLikeRejectsNonNumberFill) {
  OpTester t("aten.full_like.default");
  t.SetArgs({t.Input(F32({3}), RandomFloats(3, 1)), StringArg("x")});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be a number"));
}

}  // namespace
}  // namespace kiln::runtime::testing
