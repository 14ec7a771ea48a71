// Shape and element type of a tensor inside the runtime. Tensors the runtime
// produces are always dense row-major (contiguous), so no strides are kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/ir/dtype.h"

namespace kiln::runtime {

// Upper bound on elements of one tensor; larger shapes are refused before
// any allocation (2^40 elements: far above this machine's memory).
inline constexpr int64_t kMaxElements = int64_t{1} << 40;
inline constexpr int kMaxRank = 8;

struct TensorMeta {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;

  int rank() const { return static_cast<int>(shape.size()); }
  // Callers must have validated the meta (see ValidateMeta) first.
  int64_t NumElements() const;
  int64_t ByteSize() const;
  std::string ToString() const;  // "f32[1,3,224,224]"

  bool operator==(const TensorMeta& o) const {
    return dtype == o.dtype && shape == o.shape;
  }
  bool operator!=(const TensorMeta& o) const { return !(*this == o); }
};

// INVALID_ARGUMENT for a bad dtype, negative size or rank > kMaxRank;
// RESOURCE_EXHAUSTED when the element count overflows kMaxElements.
absl::Status ValidateMeta(const TensorMeta& meta);

// Contiguous (row-major) strides in elements.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape);

}  // namespace kiln::runtime
