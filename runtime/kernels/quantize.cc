// PT2E's quantize and dequantize ops (quantized_decomposed.*, from
// torch/ao/quantization/fx/_decomposed.py, which torchao's convert_pt2e
// emits), computed as those reference implementations compute them, in
// the same precision, so that a quantized value is the one eager gives:
//   quantize_per_tensor:   clamp(round(x * f32(1.0 / scale)) + zp, qmin, qmax)
//   dequantize_per_tensor: (f32(q) - zp) * f32(scale)
//   quantize_per_channel:  clamp(round(x * (1 / scales[c])) + zps[c], qmin, qmax),
//                          1 / scales[c] in the scales' dtype
//   dequantize_per_channel: (q - zps[c]) * scales[c], in the scales' dtype,
//                          then f32
// round() is half to even; the clamped value converts to the quantized
// dtype as _to_copy does (dtype_convert.h). Quantized dtypes: u8, i8, i16,
// i32; quant_min and quant_max must lie in the dtype's range, as the
// reference asserts. A constant weight's dequantize folds at compile time
// (compile/constant_folding.h); activations' run per call.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/dtype_convert.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kGrain = int64_t{1} << 14;

bool IsQuantizedDType(DType d) {
  return d == DType::kU8 || d == DType::kI8 || d == DType::kI16 || d == DType::kI32;
}

// The `dtype` argument at `pos`: a quantized dtype.
absl::StatusOr<DType> QuantizedDType(const NodeArgs& args, int pos) {
  const Arg* arg = args.Find(pos, "dtype");
  if (arg == nullptr || arg->kind != Arg::Kind::kDType ||
      !IsValidDType(static_cast<int>(arg->i))) {
    return args.Error("dtype must be a dtype");
  }
  const DType d = static_cast<DType>(arg->i);
  if (!IsQuantizedDType(d)) {
    return args.Unimplemented(absl::StrCat("quantized dtype ", DTypeName(d),
                                           " (supported: uint8, int8, int16, int32)"));
  }
  return d;
}

struct Range {
  int64_t min, max;
};

// quant_min and quant_max at `pos`, `pos + 1`, checked against `dtype`'s
// range as the reference does.
absl::StatusOr<Range> QuantRange(const NodeArgs& args, int pos, DType dtype) {
  KILN_ASSIGN_OR_RETURN(int64_t qmin, args.Int(pos, "quant_min"));
  KILN_ASSIGN_OR_RETURN(int64_t qmax, args.Int(pos + 1, "quant_max"));
  int64_t lo = 0, hi = 0;
  VisitDType(dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T>) {
      lo = std::numeric_limits<T>::min();
      hi = std::numeric_limits<T>::max();
    }
  });
  if (qmin < lo || qmax > hi) {
    return args.Error(absl::StrCat("quant_min ", qmin, " and quant_max ", qmax,
                                   " must lie in ", DTypeName(dtype), "'s range [", lo, ", ",
                                   hi, "]"));
  }
  return Range{qmin, qmax};
}

// The `out_dtype` keyword of the dequantize ops: f32 (or absent).
absl::Status CheckOutDType(const NodeArgs& args) {
  const Arg* out = args.Find(-1, "out_dtype");
  if (out == nullptr) return absl::OkStatus();
  if (out->kind != Arg::Kind::kDType) return args.Error("out_dtype must be a dtype");
  if (static_cast<DType>(out->i) != DType::kF32) {
    return args.Unimplemented("dequantizing to another dtype than float32");
  }
  return absl::OkStatus();
}

// clamp(round(v) + zp, qmin, qmax) as the quantized dtype Q, in T (f32 or
// f64): NaN stays NaN through the clamp, as torch.clamp keeps it.
template <typename Q, typename T>
inline Q QuantizeOne(T scaled, T zp, T qmin, T qmax) {
  T v = std::nearbyint(scaled) + zp;
  v = v < qmin ? qmin : v;
  v = v > qmax ? qmax : v;
  return ConvertElement<Q, T>(v);
}

class QuantizePerTensorKernel final : public Kernel {
 public:
  QuantizePerTensorKernel(DType q, double scale, int64_t zp, Range range, int64_t n)
      : q_(q),
        inv_scale_(static_cast<float>(1.0 / scale)),
        zp_(static_cast<float>(zp)),
        qmin_(static_cast<float>(range.min)),
        qmax_(static_cast<float>(range.max)),
        n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* x = ctx.inputs[0].as<const float>();
    VisitDType(q_, [&](auto t) {
      using Q = decltype(t);
      if constexpr (std::is_integral_v<Q>) {
        Q* out = ctx.outputs[0].as<Q>();
        ParallelFor(n_, kGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            out[i] = QuantizeOne<Q, float>(x[i] * inv_scale_, zp_, qmin_, qmax_);
          }
        });
      }
    });
    return absl::OkStatus();
  }

 private:
  DType q_;
  float inv_scale_, zp_, qmin_, qmax_;
  int64_t n_;
};

class DequantizePerTensorKernel final : public Kernel {
 public:
  DequantizePerTensorKernel(DType q, double scale, int64_t zp, int64_t n)
      : q_(q), scale_(static_cast<float>(scale)), zp_(static_cast<float>(zp)), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    float* out = ctx.outputs[0].as<float>();
    VisitDType(q_, [&](auto t) {
      using Q = decltype(t);
      if constexpr (std::is_integral_v<Q>) {
        const Q* in = ctx.inputs[0].as<const Q>();
        ParallelFor(n_, kGrain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            out[i] = (static_cast<float>(in[i]) - zp_) * scale_;
          }
        });
      }
    });
    return absl::OkStatus();
  }

 private:
  DType q_;
  float scale_, zp_;
  int64_t n_;
};

// Element (o, c, i) of a tensor seen as [outer, channels, inner] around
// the axis.
struct AxisSplit {
  int64_t outer = 1, channels = 1, inner = 1;
};

absl::StatusOr<AxisSplit> SplitAt(const NodeArgs& args, const TensorMeta& self, int pos) {
  KILN_ASSIGN_OR_RETURN(int64_t axis, args.Int(pos, "axis"));
  const int64_t rank = static_cast<int64_t>(self.shape.size());
  if (axis < -rank || axis >= rank) {
    return args.Error(absl::StrCat("axis ", axis, " is out of range for ", rank, " dims"));
  }
  if (axis < 0) axis += rank;
  AxisSplit s;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) s.outer *= self.shape[d];
    if (d == axis) s.channels = self.shape[d];
    if (d > axis) s.inner *= self.shape[d];
  }
  return s;
}

// The per-channel parameters: scales (f32 or f64) and zero points (i64 or
// i32; optional for dequantize), one per channel of the axis.
struct ChannelParams {
  DType scale_dtype = DType::kF32;
  std::optional<DType> zp_dtype;
};

absl::StatusOr<ChannelParams> CheckChannelParams(const NodeArgs& args, int64_t channels,
                                                 bool zp_optional) {
  ChannelParams p;
  KILN_ASSIGN_OR_RETURN(TensorMeta scales, args.Tensor(1, "scales"));
  if (scales.dtype != DType::kF32 && scales.dtype != DType::kF64) {
    return args.Unimplemented(absl::StrCat("scales of ", DTypeName(scales.dtype)));
  }
  if (scales.NumElements() != channels) {
    return args.Error(absl::StrCat("scales has ", scales.NumElements(), " elements for ",
                                   channels, " channels"));
  }
  p.scale_dtype = scales.dtype;
  std::optional<TensorMeta> zps;
  if (zp_optional) {
    KILN_ASSIGN_OR_RETURN(zps, args.OptionalTensor(2, "zero_points"));
  } else {
    KILN_ASSIGN_OR_RETURN(TensorMeta z, args.Tensor(2, "zero_points"));
    zps = z;
  }
  if (zps) {
    if (zps->dtype != DType::kI64 && zps->dtype != DType::kI32) {
      return args.Unimplemented(absl::StrCat("zero_points of ", DTypeName(zps->dtype)));
    }
    if (zps->NumElements() != channels) {
      return args.Error(absl::StrCat("zero_points has ", zps->NumElements(),
                                     " elements for ", channels, " channels"));
    }
    p.zp_dtype = zps->dtype;
  }
  return p;
}

// Channel c's zero point, from i64 or i32 data.
inline int64_t ZeroPoint(const void* zps, DType dtype, int64_t c) {
  return dtype == DType::kI64 ? static_cast<const int64_t*>(zps)[c]
                              : static_cast<const int32_t*>(zps)[c];
}

class QuantizePerChannelKernel final : public Kernel {
 public:
  QuantizePerChannelKernel(DType q, ChannelParams params, AxisSplit split, Range range)
      : q_(q), params_(params), split_(split), range_(range) {}

  absl::Status Run(const KernelContext& ctx) const override {
    if (params_.scale_dtype == DType::kF32) {
      RunIn<float>(ctx);
    } else {
      RunIn<double>(ctx);
    }
    return absl::OkStatus();
  }

 private:
  // `x * (1.0 / scales)` promotes to the scales' dtype T.
  template <typename T>
  void RunIn(const KernelContext& ctx) const {
    const float* x = ctx.inputs[0].as<const float>();
    const T* scales = ctx.inputs[1].as<const T>();
    const void* zps = ctx.inputs[2].data;
    const T qmin = static_cast<T>(range_.min), qmax = static_cast<T>(range_.max);
    const int64_t rows = split_.outer * split_.channels, inner = split_.inner;
    VisitDType(q_, [&](auto t) {
      using Q = decltype(t);
      if constexpr (std::is_integral_v<Q>) {
        Q* out = ctx.outputs[0].as<Q>();
        ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
                    [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const int64_t c = r % split_.channels;
            const T inv = T{1} / scales[c];
            const T zp = static_cast<T>(ZeroPoint(zps, *params_.zp_dtype, c));
            for (int64_t i = r * inner; i < (r + 1) * inner; ++i) {
              out[i] = QuantizeOne<Q, T>(static_cast<T>(x[i]) * inv, zp, qmin, qmax);
            }
          }
        });
      }
    });
  }

  DType q_;
  ChannelParams params_;
  AxisSplit split_;
  Range range_;
};

class DequantizePerChannelKernel final : public Kernel {
 public:
  DequantizePerChannelKernel(DType q, ChannelParams params, AxisSplit split)
      : q_(q), params_(params), split_(split) {}

  absl::Status Run(const KernelContext& ctx) const override {
    if (params_.scale_dtype == DType::kF32) {
      RunIn<float>(ctx);
    } else {
      RunIn<double>(ctx);
    }
    return absl::OkStatus();
  }

 private:
  // `(q - zps) * scales` in the scales' dtype T (the difference is exact
  // in integers), then to f32.
  template <typename T>
  void RunIn(const KernelContext& ctx) const {
    const T* scales = ctx.inputs[1].as<const T>();
    const void* zps = params_.zp_dtype ? ctx.inputs[2].data : nullptr;
    float* out = ctx.outputs[0].as<float>();
    const int64_t rows = split_.outer * split_.channels, inner = split_.inner;
    VisitDType(q_, [&](auto t) {
      using Q = decltype(t);
      if constexpr (std::is_integral_v<Q>) {
        const Q* in = ctx.inputs[0].as<const Q>();
        ParallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)),
                    [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const int64_t c = r % split_.channels;
            const T scale = scales[c];
            const int64_t zp = zps != nullptr ? ZeroPoint(zps, *params_.zp_dtype, c) : 0;
            for (int64_t i = r * inner; i < (r + 1) * inner; ++i) {
              out[i] = static_cast<float>(static_cast<T>(in[i] - zp) * scale);
            }
          }
        });
      }
    });
  }

  DType q_;
  ChannelParams params_;
  AxisSplit split_;
};

absl::StatusOr<TensorMeta> FloatInput(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "input"));
  if (self.dtype != DType::kF32) {
    return args.Unimplemented(absl::StrCat("quantizing ", DTypeName(self.dtype)));
  }
  return self;
}

// The quantized input of a dequantize op, of the `dtype` it names.
absl::StatusOr<TensorMeta> QuantizedInput(const NodeArgs& args, DType dtype) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "input"));
  if (self.dtype != dtype) {
    return args.Error(absl::StrCat("input is ", DTypeName(self.dtype), ", dtype says ",
                                   DTypeName(dtype)));
  }
  return self;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareQuantizePerTensor(const NodeArgs& args) {
  // (input, scale, zero_point, quant_min, quant_max, dtype)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, FloatInput(args));
  KILN_ASSIGN_OR_RETURN(double scale, args.Float(1, "scale"));
  KILN_ASSIGN_OR_RETURN(int64_t zp, args.Int(2, "zero_point"));
  KILN_ASSIGN_OR_RETURN(DType q, QuantizedDType(args, 5));
  KILN_ASSIGN_OR_RETURN(Range range, QuantRange(args, 3, q));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{q, self.shape});
  op.kernel = std::make_unique<QuantizePerTensorKernel>(q, scale, zp, range, self.NumElements());
  return op;
}

absl::StatusOr<PreparedOp> PrepareDequantizePerTensor(const NodeArgs& args) {
  // (input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype=None)
  KILN_ASSIGN_OR_RETURN(DType q, QuantizedDType(args, 5));
  KILN_ASSIGN_OR_RETURN(TensorMeta self, QuantizedInput(args, q));
  KILN_ASSIGN_OR_RETURN(double scale, args.Float(1, "scale"));
  KILN_ASSIGN_OR_RETURN(int64_t zp, args.Int(2, "zero_point"));
  KILN_RETURN_IF_ERROR(QuantRange(args, 3, q).status());
  KILN_RETURN_IF_ERROR(CheckOutDType(args));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, self.shape});
  op.kernel = std::make_unique<DequantizePerTensorKernel>(q, scale, zp, self.NumElements());
  return op;
}

absl::StatusOr<PreparedOp> PrepareQuantizePerChannel(const NodeArgs& args) {
  // (input, scales, zero_points, axis, quant_min, quant_max, dtype)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, FloatInput(args));
  KILN_ASSIGN_OR_RETURN(AxisSplit split, SplitAt(args, self, 3));
  KILN_ASSIGN_OR_RETURN(ChannelParams params,
                        CheckChannelParams(args, split.channels, /*zp_optional=*/false));
  KILN_ASSIGN_OR_RETURN(DType q, QuantizedDType(args, 6));
  KILN_ASSIGN_OR_RETURN(Range range, QuantRange(args, 4, q));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{q, self.shape});
  op.kernel = std::make_unique<QuantizePerChannelKernel>(q, params, split, range);
  return op;
}

absl::StatusOr<PreparedOp> PrepareDequantizePerChannel(const NodeArgs& args) {
  // (input, scales, zero_points?, axis, quant_min, quant_max, dtype, *,
  //  out_dtype=None)
  KILN_ASSIGN_OR_RETURN(DType q, QuantizedDType(args, 6));
  KILN_ASSIGN_OR_RETURN(TensorMeta self, QuantizedInput(args, q));
  KILN_ASSIGN_OR_RETURN(AxisSplit split, SplitAt(args, self, 3));
  KILN_ASSIGN_OR_RETURN(ChannelParams params,
                        CheckChannelParams(args, split.channels, /*zp_optional=*/true));
  KILN_RETURN_IF_ERROR(QuantRange(args, 4, q).status());
  KILN_RETURN_IF_ERROR(CheckOutDType(args));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, self.shape});
  op.kernel = std::make_unique<DequantizePerChannelKernel>(q, params, split);
  return op;
}

}  // namespace kiln::runtime
