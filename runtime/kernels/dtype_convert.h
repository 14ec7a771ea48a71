// Element conversions between every runtime dtype with PyTorch's semantics
// on x86: float -> i64/i32 truncates toward zero (out of range and NaN give
// the integer minimum, as cvttss2si does); float -> i16/i8 goes through
// i32 and wraps, float -> u8 through i64 and wraps; integer narrowing
// wraps; anything -> bool is `!= 0` (NaN is true); bool -> number is 0 or 1.
// f16 and bf16 round to nearest even through f32 (f64 -> f16 too, as
// c10::Half does); a NaN becomes f16 0x7e00-style quiet NaN and bf16 0xffff,
// ATen's vectorized bit patterns.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "runtime/exec/parallel.h"
#include "runtime/ir/dtype.h"

namespace kiln::runtime {

// Storage for the two 16-bit float dtypes: bits only; arithmetic happens
// in f32.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float ToFloat(BFloat16 v) { return BitsFloat(static_cast<uint32_t>(v.bits) << 16); }

inline BFloat16 ToBFloat16(float f) {
  if (std::isnan(f)) return BFloat16{0xffff};
  const uint32_t u = FloatBits(f);
  const uint32_t rounding = 0x7fff + ((u >> 16) & 1);  // to nearest, ties to even
  return BFloat16{static_cast<uint16_t>((u + rounding) >> 16)};
}

inline float ToFloat(Half v) {
  const uint32_t sign = static_cast<uint32_t>(v.bits & 0x8000) << 16;
  const uint32_t exp = (v.bits >> 10) & 0x1f;
  const uint32_t mant = v.bits & 0x3ff;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000 | (mant << 13));
  if (exp != 0) return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in f32.
  const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -magnitude : magnitude;
}

inline Half ToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t abs = u & 0x7fffffff;
  if (abs > 0x7f800000) {  // NaN: quiet, top payload bits kept
    return Half{static_cast<uint16_t>(sign | 0x7e00 | ((abs >> 13) & 0x3ff))};
  }
  if (abs >= 0x477ff000) return Half{static_cast<uint16_t>(sign | 0x7c00)};  // rounds past 65504
  if (abs < 0x38800000) {
    // Below f16's smallest normal: round mant * 2^-24 to an integer, ties
    // to even (the float's magnitude times 2^24 is exact).
    const float scaled = BitsFloat(abs) * 16777216.0f;
    return Half{static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  // Normal: rebias the exponent and round the 13 dropped bits to even.
  const uint32_t rounding = 0xfff + ((abs >> 13) & 1);
  return Half{static_cast<uint16_t>(sign | ((abs - (112u << 23) + rounding) >> 13))};
}

template <typename T>
inline constexpr bool kIsHalfLike = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename To, typename From>
inline To ConvertElement(From v) {
  if constexpr (kIsHalfLike<From>) {
    return ConvertElement<To>(ToFloat(v));
  } else if constexpr (std::is_same_v<To, Half>) {
    return ToHalf(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return ToBFloat16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, int64_t> && std::is_floating_point_v<From>) {
    // Out-of-range and NaN are undefined in C++; give x86's answer
    // (INT64_MIN), which is what ATen's cast produces on this machine.
    if (!(v >= From(-9.2233720368547758e18) && v < From(9.2233720368547758e18))) {
      return std::numeric_limits<int64_t>::min();
    }
    return static_cast<int64_t>(v);
  } else if constexpr (std::is_same_v<To, int32_t> && std::is_floating_point_v<From>) {
    if (!(v >= From(-2147483648.0) && v < From(2147483648.0))) {  // x86's INT32_MIN, as above
      return std::numeric_limits<int32_t>::min();
    }
    return static_cast<int32_t>(v);
  } else if constexpr ((std::is_same_v<To, int16_t> || std::is_same_v<To, int8_t>) &&
                       std::is_floating_point_v<From>) {
    return static_cast<To>(ConvertElement<int32_t>(v));
  } else if constexpr (std::is_same_v<To, uint8_t> && std::is_floating_point_v<From>) {
    return static_cast<uint8_t>(ConvertElement<int64_t>(v));
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

// Calls fn(T{}) with T the C++ element type of `d` (Half and BFloat16 for
// the 16-bit floats). `d` must be a valid dtype.
template <typename Fn>
void VisitDType(DType d, Fn&& fn) {
  switch (d) {
    case DType::kF32: fn(float{}); break;
    case DType::kF64: fn(double{}); break;
    case DType::kF16: fn(Half{}); break;
    case DType::kBF16: fn(BFloat16{}); break;
    case DType::kI64: fn(int64_t{}); break;
    case DType::kI32: fn(int32_t{}); break;
    case DType::kI16: fn(int16_t{}); break;
    case DType::kI8: fn(int8_t{}); break;
    case DType::kU8: fn(uint8_t{}); break;
    default: fn(bool{}); break;
  }
}

// The dtypes the typed elementwise kernels handle.
inline bool IsElementwiseDType(DType d) {
  return d == DType::kF32 || d == DType::kI64 || d == DType::kBool;
}

// The dtypes ConvertElements converts between (casts, aten._to_copy): all.
inline bool IsConvertibleDType(DType d) { return IsValidDType(static_cast<int>(d)); }

// Casts to and from c64, as ATen: a real value v becomes (v, 0); a complex
// value cast to bool is true when either part is nonzero, and cast to any
// other real dtype keeps its real part (ATen warns that the imaginary part
// is discarded) converted as an f32 would be.
inline void ConvertComplexElements(DType from, const void* in, DType to, void* out, int64_t n) {
  if (from == to) {
    std::memcpy(out, in, static_cast<size_t>(n) * ElementSize(from));
    return;
  }
  if (to == DType::kC64) {
    float* o = static_cast<float*>(out);
    VisitDType(from, [&](auto from_tag) {
      using From = decltype(from_tag);
      const From* i = static_cast<const From*>(in);
      ParallelFor(n, int64_t{1} << 15, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          o[2 * k] = ConvertElement<float>(i[k]);
          o[2 * k + 1] = 0.0f;
        }
      });
    });
    return;
  }
  const float* i = static_cast<const float*>(in);
  if (to == DType::kBool) {
    bool* o = static_cast<bool*>(out);
    ParallelFor(n, int64_t{1} << 15, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) o[k] = i[2 * k] != 0.0f || i[2 * k + 1] != 0.0f;
    });
    return;
  }
  VisitDType(to, [&](auto to_tag) {
    using To = decltype(to_tag);
    To* o = static_cast<To*>(out);
    ParallelFor(n, int64_t{1} << 15, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) o[k] = ConvertElement<To>(i[2 * k]);
    });
  });
}

// out[i] = convert(in[i]) for IsConvertibleDType pairs.
inline void ConvertElements(DType from, const void* in, DType to, void* out, int64_t n) {
  if (from == DType::kC64 || to == DType::kC64) {
    ConvertComplexElements(from, in, to, out, n);
    return;
  }
  VisitDType(from, [&](auto from_tag) {
    using From = decltype(from_tag);
    VisitDType(to, [&](auto to_tag) {
      using To = decltype(to_tag);
      ConvertRange(static_cast<const From*>(in), static_cast<To*>(out), n);
    });
  });
}

}  // namespace kiln::runtime
