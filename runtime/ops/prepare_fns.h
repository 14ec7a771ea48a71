// Declarations of every prepare function named in ops.def.
#pragma once

#include "runtime/ops/op_def.h"

namespace kiln::runtime {

#define KILN_OP(target, dtypes, fn) absl::StatusOr<PreparedOp> fn(const NodeArgs& args);
#include "runtime/ops/ops.def"
#undef KILN_OP

}  // namespace kiln::runtime
