// aten.convolution for what convolution.cc's 1-D and 2-D kernels do not
// take: transposed convolutions (1-D, 2-D and 3-D) and 3-D convolutions.
#pragma once

#include "absl/status/statusor.h"
#include "runtime/ir/tensor_meta.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// Whether aten.convolution with this input and `transposed` belongs to
// PrepareGeneralConvolution.
inline bool IsGeneralConvolution(const TensorMeta& input, bool transposed) {
  return transposed || input.rank() == 5;
}

// The node's output and kernel (aten.convolution.default's arguments).
absl::StatusOr<PreparedOp> PrepareGeneralConvolution(const NodeArgs& args);

}  // namespace kiln::runtime
