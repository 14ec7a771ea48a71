#include "runtime/ir/dtype.h"

namespace kiln::runtime {

size_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kI16: return 2;
    case DType::kI8: return 1;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
    case DType::kC64: return 8;
    case DType::kInvalid: return 0;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kI16: return "i16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kC64: return "c64";
    case DType::kInvalid: return "invalid";
  }
  return "invalid";
}

bool IsValidDType(int wire_value) {
  return wire_value >= static_cast<int>(DType::kF32) &&
         wire_value <= static_cast<int>(kLastDType);
}

}  // namespace kiln::runtime
