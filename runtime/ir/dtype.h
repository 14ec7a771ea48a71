// Element types of the runtime. Values match kiln.v1.DType on the wire.
#pragma once

#include <cstddef>
#include <cstdint>


namespace kiln::runtime {

enum class DType : int {
  kInvalid = 0,
  kF32 = 1,
  kF64 = 2,
  kF16 = 3,
  kBF16 = 4,
  kI64 = 5,
  kI32 = 6,
  kI16 = 7,
  kI8 = 8,
  kU8 = 9,
  kBool = 10,
  // std::complex<float>: interleaved (real, imaginary) f32 pairs.
  kC64 = 11,
};
// The last value of the enum: the valid dtypes are kF32 ... kLastDType.
constexpr DType kLastDType = DType::kC64;

// Bit for `dtype` in a DTypeMask (the op registry declares masks).
constexpr uint32_t DTypeBit(DType dtype) { return 1u << static_cast<int>(dtype); }
using DTypeMask = uint32_t;
constexpr DTypeMask kF32Only = DTypeBit(DType::kF32);
constexpr DTypeMask kF32I64 = kF32Only | DTypeBit(DType::kI64);
constexpr DTypeMask kF32I64Bool = kF32I64 | DTypeBit(DType::kBool);
constexpr DTypeMask kI64Bool = DTypeBit(DType::kI64) | DTypeBit(DType::kBool);
// Every real dtype of the enum (not c64: ops that compute declare complex
// support themselves).
constexpr DTypeMask kAllDTypes = kF32I64Bool | DTypeBit(DType::kF64) | DTypeBit(DType::kF16) |
                                 DTypeBit(DType::kBF16) | DTypeBit(DType::kI32) |
                                 DTypeBit(DType::kI16) | DTypeBit(DType::kI8) |
                                 DTypeBit(DType::kU8);
// What the data movement ops (views, copies, concatenation, gathers) move:
// they copy elements by size, so any dtype, complex included.
constexpr DTypeMask kMovable = kAllDTypes | DTypeBit(DType::kC64);

// Bytes per element; 0 for kInvalid or values outside the enum.
size_t ElementSize(DType dtype);
// "f32", "i64", ...; "invalid" for anything unknown.
const char* DTypeName(DType dtype);
// True for the enum's named values except kInvalid (wire values are
// untrusted ints).
bool IsValidDType(int wire_value);

}  // namespace kiln::runtime
