// Matrix products that other kernels' prepare functions hand over to the
// matmul kernel (matmul.cc), which packs a constant right operand once and
// runs it on the panel loops or oneDNN.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// aten.bmm(self [1, M, K], mat2 [1, K, N]) whose mat2 is a constant (an
// einsum against a weight, as XLNet's projections are): the [M, K] x
// [K, N] product, output [1, M, N].
absl::StatusOr<PreparedOp> PrepareBatchOneMatmulOfConstant(const NodeArgs& args, int64_t m,
                                                           int64_t k, int64_t n);

}  // namespace kiln::runtime
