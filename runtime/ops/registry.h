// Lookup into the op list (ops/ops.def).
#pragma once

#include <string_view>

#include "absl/types/span.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// Every op, in ops.def order. The index of an op is stable for one build.
absl::Span<const OpDef> AllOps();
// Index of `target` in AllOps(), or -1 when unsupported.
int FindOp(std::string_view target);

}  // namespace kiln::runtime
