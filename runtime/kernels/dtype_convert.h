// Element conversions between the runtime's f32, i64, i32 and bool with
// PyTorch's semantics: float -> int truncates toward zero, i64 -> i32 wraps,
// anything -> bool is `!= 0` (NaN is true), bool -> number is 0 or 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/exec/parallel.h"
#include "runtime/ir/dtype.h"

namespace kiln::runtime {

// The dtypes the typed elementwise kernels handle.
inline bool IsElementwiseDType(DType d) {
  return d == DType::kF32 || d == DType::kI64 || d == DType::kBool;
}

// The dtypes ConvertElements converts between (casts, aten._to_copy).
inline bool IsConvertibleDType(DType d) { return IsElementwiseDType(d) || d == DType::kI32; }

template <typename To, typename From>
inline To ConvertElement(From v) {
  if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, int64_t> &&
                       std::is_floating_point_v<From>) {
    // Out-of-range and NaN are undefined in C++; give x86's answer
    // (INT64_MIN), which is what ATen's cast produces on this machine.
    if (!(v >= -9.2233720368547758e18f && v < 9.2233720368547758e18f)) {
      return std::numeric_limits<int64_t>::min();
    }
    return static_cast<int64_t>(v);
  } else if constexpr (std::is_same_v<To, int32_t> && std::is_floating_point_v<From>) {
    if (!(v >= -2147483648.0f && v < 2147483648.0f)) {  // x86's INT32_MIN, as above
      return std::numeric_limits<int32_t>::min();
    }
    return static_cast<int32_t>(v);
  } else {
    return static_cast<To>(v);
  }
}

template <typename To, typename From>
void ConvertRange(const From* in, To* out, int64_t n) {
  ParallelFor(n, int64_t{1} << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = ConvertElement<To>(in[i]);
  });
}

// out[i] = convert(in[i]) for IsConvertibleDType pairs.
inline void ConvertElements(DType from, const void* in, DType to, void* out,
                            int64_t n) {
  auto dispatch_to = [&](auto* typed_in) {
    switch (to) {
      case DType::kF32:
        ConvertRange(typed_in, static_cast<float*>(out), n);
        break;
      case DType::kI64:
        ConvertRange(typed_in, static_cast<int64_t*>(out), n);
        break;
      case DType::kI32:
        ConvertRange(typed_in, static_cast<int32_t*>(out), n);
        break;
      default:
        ConvertRange(typed_in, static_cast<bool*>(out), n);
        break;
    }
  };
  switch (from) {
    case DType::kF32:
      dispatch_to(static_cast<const float*>(in));
      break;
    case DType::kI64:
      dispatch_to(static_cast<const int64_t*>(in));
      break;
    case DType::kI32:
      dispatch_to(static_cast<const int32_t*>(in));
      break;
    default:
      dispatch_to(static_cast<const bool*>(in));
      break;
  }
}

}  // namespace kiln::runtime
