// Helpers for op tests with i64 and bool tensors and list arguments, on top
// of kernel_test_util.h's OpTester.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {

inline TensorMeta I64(std::vector<int64_t> shape) {
  return TensorMeta{DType::kI64, std::move(shape)};
}
inline TensorMeta I32(std::vector<int64_t> shape) {
  return TensorMeta{DType::kI32, std::move(shape)};
}
inline TensorMeta Bool(std::vector<int64_t> shape) {
  return TensorMeta{DType::kBool, std::move(shape)};
}

inline Arg I64Input(OpTester& t, std::vector<int64_t> shape,
                    const std::vector<int64_t>& data) {
  return t.RawInput(I64(std::move(shape)), data.data(),
                    data.size() * sizeof(int64_t));
}

inline Arg I32Input(OpTester& t, std::vector<int64_t> shape, const std::vector<int32_t>& data) {
  return t.RawInput(I32(std::move(shape)), data.data(), data.size() * sizeof(int32_t));
}

// `data` as 0/1 ints for readability.
inline Arg BoolInput(OpTester& t, std::vector<int64_t> shape,
                     const std::vector<int>& data) {
  std::vector<uint8_t> bytes(data.begin(), data.end());
  return t.RawInput(Bool(std::move(shape)), bytes.data(), bytes.size());
}

// Output buffers of one run, readable as any element type.
class Outputs {
 public:
  explicit Outputs(const OpTester& t) : metas_(t.output_metas()) {
    for (const TensorMeta& m : metas_) {
      buffers_.emplace_back(static_cast<size_t>(m.ByteSize()));
      std::memset(buffers_.back().data(), 0xff, buffers_.back().size());
    }
  }
  absl::Status Run(const OpTester& t) { return t.RunInto(buffers_); }

  template <typename T>
  std::vector<T> As(int i) const {
    std::vector<T> v(metas_[i].NumElements());
    if (!v.empty()) std::memcpy(v.data(), buffers_[i].data(), v.size() * sizeof(T));
    return v;
  }
  std::vector<int> Bools(int i) const {
    std::vector<uint8_t> b = As<uint8_t>(i);
    return std::vector<int>(b.begin(), b.end());
  }

 private:
  std::vector<TensorMeta> metas_;
  std::vector<AlignedBuffer> buffers_;
};

// Flat index -> per-dim index for row-major `shape`.
inline std::vector<int64_t> Unravel(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

inline int64_t Ravel(const std::vector<int64_t>& idx,
                     const std::vector<int64_t>& shape) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return off;
}

}  // namespace kiln::runtime::testing
