#include "runtime/ir/tensor_meta.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::runtime {

int64_t TensorMeta::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t TensorMeta::ByteSize() const {
  return NumElements() * static_cast<int64_t>(ElementSize(dtype));
}

std::string TensorMeta::ToString() const {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

absl::Status ValidateMeta(const TensorMeta& meta) {
  if (ElementSize(meta.dtype) == 0) {
    return absl::InvalidArgumentError("invalid dtype");
  }
  if (meta.rank() > kMaxRank) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", meta.rank(), " exceeds the limit of ", kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : meta.shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("negative dimension in shape ", meta.ToString()));
    }
    if (d != 0 && n > kMaxElements / d) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shape ", meta.ToString(), " has more than 2^40 elements"));
    }
    n *= d;
  }
  return absl::OkStatus();
}

std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] == 0 ? 1 : shape[i];
  }
  return strides;
}

}  // namespace kiln::runtime
