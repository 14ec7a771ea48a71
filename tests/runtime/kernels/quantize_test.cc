// PT2E's quantize and dequantize ops against references written from
// torch/ao/quantization/fx/_decomposed.py, in the precision it computes:
// quantized values must be exactly eager's (ties round to even, the clamp
// bounds hold, per-tensor 1/scale is taken in double then f32, per-channel
// in the scales' dtype), dequantized ones within an f32 rounding (the
// reference is double). Arguments the reference refuses are refused.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/ir/arg_builders.h"
#include "tests/runtime/kernels/kernel_test_util.h"
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

constexpr char kQuantizeTensor[] = "quantized_decomposed.quantize_per_tensor.default";
constexpr char kDequantizeTensor[] = "quantized_decomposed.dequantize_per_tensor.default";
constexpr char kQuantizeChannel[] = "quantized_decomposed.quantize_per_channel.default";
constexpr char kDequantizeChannel[] = "quantized_decomposed.dequantize_per_channel.default";

// Activations around the quantization grid, with exact ties (k + 0.5
// steps), values past both clamp bounds, and signed zeros.
std::vector<float> Activations(int n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-200.f * scale, 200.f * scale);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = u(rng);
  for (int i = 0; i < 8 && i < n; ++i) x[i] = (static_cast<float>(i) - 3.5f) * scale;
  if (n > 9) x[8] = -0.f, x[9] = 1e9f;
  return x;
}

// quantize_per_tensor as the reference computes it, one element.
template <typename Q>
Q ReferenceQuantize(float x, double scale, int64_t zp, int64_t qmin, int64_t qmax) {
  const float inv = static_cast<float>(1.0 / scale);
  float v = std::nearbyint(x * inv) + static_cast<float>(zp);
  v = std::min(std::max(v, static_cast<float>(qmin)), static_cast<float>(qmax));
  return static_cast<Q>(v);
}

template <typename Q>
std::vector<Q> QuantizePerTensor(const std::vector<float>& x, double scale, int64_t zp,
                                 int64_t qmin, int64_t qmax, DType q) {
  OpTester t(kQuantizeTensor);
  t.SetArgs({t.Input(F32({static_cast<int64_t>(x.size())}), x), FloatArg(scale), IntArg(zp),
             IntArg(qmin), IntArg(qmax), DTypeArg(q)});
  EXPECT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0].dtype, q);
  Outputs out(t);
  EXPECT_TRUE(out.Run(t).ok());
  return out.As<Q>(0);
}

TEST(QuantizePerTensor, U8AndI8AreEagersValuesTiesToEvenAndClamped) {
  const double scale = 0.0473;
  const std::vector<float> x = Activations(5000, static_cast<float>(scale), 1);
  const std::vector<uint8_t> u8 = QuantizePerTensor<uint8_t>(x, scale, 128, 0, 255, DType::kU8);
  const std::vector<int8_t> i8 = QuantizePerTensor<int8_t>(x, scale, -3, -128, 127, DType::kI8);
  // A narrower range than the dtype's, as reduce_range quantizers use.
  const std::vector<uint8_t> narrow = QuantizePerTensor<uint8_t>(x, scale, 64, 0, 127, DType::kU8);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(u8[i], ReferenceQuantize<uint8_t>(x[i], scale, 128, 0, 255)) << i << " " << x[i];
    ASSERT_EQ(i8[i], ReferenceQuantize<int8_t>(x[i], scale, -3, -128, 127)) << i << " " << x[i];
    ASSERT_EQ(narrow[i], ReferenceQuantize<uint8_t>(x[i], scale, 64, 0, 127)) << i;
  }
  // The ties: -3.5, -2.5 ... 3.5 steps round to -4, -2, -2, 0, 0, 2, 2, 4.
  const std::vector<float> ties = {-3.5f, -2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 3.5f};
  const std::vector<int8_t> got = QuantizePerTensor<int8_t>(ties, 1.0, 0, -128, 127, DType::kI8);
  EXPECT_EQ(got, (std::vector<int8_t>{-4, -2, -2, 0, 0, 2, 2, 4}));
}

TEST(DequantizePerTensor, IsZeroPointThenScaleInF32) {
  std::vector<uint8_t> q(256);
  for (int i = 0; i < 256; ++i) q[i] = static_cast<uint8_t>(i);
  const double scale = 0.0213, zp = 131;
  OpTester t(kDequantizeTensor);
  t.SetArgs({t.RawInput(TensorMeta{DType::kU8, {16, 16}}, q.data(), q.size()),
             FloatArg(scale), IntArg(131), IntArg(0), IntArg(255), DTypeArg(DType::kU8)});
  t.AddKwarg("out_dtype", DTypeArg(DType::kF32));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], (TensorMeta{DType::kF32, {16, 16}}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want(256);
  for (int i = 0; i < 256; ++i) want[i] = (i - zp) * scale;
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 1e-7));
}

// Per channel over axis `axis` of a [2, 3, 4, 5] tensor.
struct ChannelCase {
  int axis;
  DType scale_dtype;
  DType zp_dtype;  // kInvalid: no zero points (dequantize only)
};

// scales / zero points of `channels` as their dtype's bytes.
std::vector<uint8_t> Bytes(const std::vector<double>& v, DType dtype) {
  std::vector<uint8_t> out(v.size() * ElementSize(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kF32) reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v[i]);
    if (dtype == DType::kF64) reinterpret_cast<double*>(out.data())[i] = v[i];
    if (dtype == DType::kI64) reinterpret_cast<int64_t*>(out.data())[i] = std::llround(v[i]);
    if (dtype == DType::kI32) {
      reinterpret_cast<int32_t*>(out.data())[i] = static_cast<int32_t>(std::lround(v[i]));
    }
  }
  return out;
}

TEST(QuantizePerChannel, EachChannelItsOwnScaleAndZeroPointOnAnyAxis) {
  const std::vector<int64_t> shape = {2, 3, 4, 5};
  for (ChannelCase c : {ChannelCase{0, DType::kF32, DType::kI64},
                        ChannelCase{1, DType::kF32, DType::kI32},
                        ChannelCase{-1, DType::kF64, DType::kI64}}) {
    SCOPED_TRACE(c.axis);
    const int axis = c.axis < 0 ? c.axis + 4 : c.axis;
    const int64_t channels = shape[axis];
    std::vector<double> scales(channels), zps(channels);
    for (int64_t k = 0; k < channels; ++k) scales[k] = 0.01 + 0.007 * k, zps[k] = k - 2;
    const std::vector<float> x = Activations(120, 0.02f, 7 + axis);
    const std::vector<uint8_t> sb = Bytes(scales, c.scale_dtype), zb = Bytes(zps, c.zp_dtype);
    OpTester t(kQuantizeChannel);
    t.SetArgs({t.Input(F32(shape), x), t.RawInput(TensorMeta{c.scale_dtype, {channels}},
                                                  sb.data(), sb.size()),
               t.RawInput(TensorMeta{c.zp_dtype, {channels}}, zb.data(), zb.size()),
               IntArg(c.axis), IntArg(-128), IntArg(127), DTypeArg(DType::kI8)});
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    const std::vector<int8_t> got = out.As<int8_t>(0);
    int64_t inner = 1;
    for (int d = axis + 1; d < 4; ++d) inner *= shape[d];
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t k = (static_cast<int64_t>(i) / inner) % channels;
      double v;
      if (c.scale_dtype == DType::kF32) {  // 1 / scale and the product in f32
        const float inv = 1.0f / static_cast<float>(scales[k]);
        v = std::nearbyint(x[i] * inv) + static_cast<float>(zps[k]);
      } else {
        v = std::nearbyint(static_cast<double>(x[i]) * (1.0 / scales[k])) + zps[k];
      }
      v = std::min(std::max(v, -128.0), 127.0);
      ASSERT_EQ(got[i], static_cast<int8_t>(v)) << i << " " << x[i];
    }
  }
}

TEST(DequantizePerChannel, WithAndWithoutZeroPoints) {
  const std::vector<int64_t> shape = {4, 3, 2};
  std::vector<int8_t> q(24);
  for (int i = 0; i < 24; ++i) q[i] = static_cast<int8_t>(i * 11 - 128);
  for (ChannelCase c : {ChannelCase{0, DType::kF32, DType::kI64},
                        ChannelCase{1, DType::kF64, DType::kI32},
                        ChannelCase{0, DType::kF32, DType::kInvalid}}) {
    SCOPED_TRACE(c.axis);
    const int64_t channels = shape[c.axis];
    std::vector<double> scales(channels), zps(channels, 0.0);
    for (int64_t k = 0; k < channels; ++k) {
      scales[k] = 0.003 * (k + 1);
      if (c.zp_dtype != DType::kInvalid) zps[k] = 3 - k;
    }
    const std::vector<uint8_t> sb = Bytes(scales, c.scale_dtype);
    OpTester t(kDequantizeChannel);
    Arg zp_arg = NoneArg();
    std::vector<uint8_t> zb;
    if (c.zp_dtype != DType::kInvalid) {
      zb = Bytes(zps, c.zp_dtype);
      zp_arg = t.RawInput(TensorMeta{c.zp_dtype, {channels}}, zb.data(), zb.size());
    }
    // The weight as convert_pt2e leaves it: a constant, folded at compile time.
    t.SetArgs({t.RawInput(TensorMeta{DType::kI8, shape}, q.data(), q.size()),
               t.RawInput(TensorMeta{c.scale_dtype, {channels}}, sb.data(), sb.size()), zp_arg,
               IntArg(c.axis), IntArg(-128), IntArg(127), DTypeArg(DType::kI8)});
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    int64_t inner = 1;
    for (size_t d = c.axis + 1; d < shape.size(); ++d) inner *= shape[d];
    std::vector<double> want(24);
    for (int i = 0; i < 24; ++i) {
      const int64_t k = (i / inner) % channels;
      want[i] = (q[i] - zps[k]) * scales[k];
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 1e-7));
  }
}

TEST(QuantizeOps, RefuseWhatTheReferenceRefuses) {
  const std::vector<float> x = {1.f, 2.f};
  auto quantize = [&](int64_t qmin, int64_t qmax, DType q) {
    OpTester t(kQuantizeTensor);
    t.SetArgs({t.Input(F32({2}), x), FloatArg(0.1), IntArg(0), IntArg(qmin), IntArg(qmax),
               DTypeArg(q)});
    return t.Prepare().code();
  };
  EXPECT_EQ(quantize(0, 255, DType::kU8), absl::StatusCode::kOk);
  EXPECT_EQ(quantize(-1, 255, DType::kU8), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize(-128, 128, DType::kI8), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize(0, 1, DType::kF32), absl::StatusCode::kUnimplemented);

  // Dequantize: the input's dtype must be the one named; f32 out only.
  const std::vector<uint8_t> q = {1, 2};
  OpTester wrong(kDequantizeTensor);
  wrong.SetArgs({wrong.RawInput(TensorMeta{DType::kU8, {2}}, q.data(), 2), FloatArg(0.1),
                 IntArg(0), IntArg(-128), IntArg(127), DTypeArg(DType::kI8)});
  EXPECT_EQ(wrong.Prepare().code(), absl::StatusCode::kInvalidArgument);
  OpTester bf16(kDequantizeTensor);
  bf16.SetArgs({bf16.RawInput(TensorMeta{DType::kU8, {2}}, q.data(), 2), FloatArg(0.1),
                IntArg(0), IntArg(0), IntArg(255), DTypeArg(DType::kU8)});
  bf16.AddKwarg("out_dtype", DTypeArg(DType::kBF16));
  EXPECT_EQ(bf16.Prepare().code(), absl::StatusCode::kUnimplemented);

  // Per channel: one scale per channel of the axis, an axis in range.
  const std::vector<float> scales = {0.1f, 0.2f, 0.3f};
  const std::vector<int64_t> zps = {0, 0, 0};
  auto per_channel = [&](int64_t axis, int64_t n_scales) {
    OpTester t(kQuantizeChannel);
    t.SetArgs({t.Input(F32({3, 2}), {1, 2, 3, 4, 5, 6}),
               t.Input(F32({n_scales}), std::vector<float>(scales.begin(),
                                                           scales.begin() + n_scales)),
               t.RawInput(TensorMeta{DType::kI64, {n_scales}}, zps.data(), n_scales * 8),
               IntArg(axis), IntArg(-128), IntArg(127), DTypeArg(DType::kI8)});
    return t.Prepare().code();
  };
  EXPECT_EQ(per_channel(0, 3), absl::StatusCode::kOk);
  EXPECT_EQ(per_channel(0, 2), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(per_channel(2, 3), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime::testing
