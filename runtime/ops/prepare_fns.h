// Declarations of every prepare function named in ops.def.
#pragma once

#include "runtime/ops/op_def.h"

namespace kiln::runtime {

#define KILN_OP(target, dtypes, fn, traits) absl::StatusOr<PreparedOp> fn(const NodeArgs& args);
#define KILN_INTERNAL_OP(target, dtypes, fn, traits) KILN_OP(target, dtypes, fn, traits)
#include "runtime/ops/ops.def"
#undef KILN_INTERNAL_OP
#undef KILN_OP

}  // namespace kiln::runtime
