// Compile-time constant folding: an op whose inputs are all constants runs
// once, while compiling, and becomes a constant shared (by a key naming
// its inputs and op) with every other graph that folds the same, and saved
// for warm starts.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/ir/graph.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {

// Largest constant a compile-time fold may create; folding must not turn a
// small graph into a huge artifact (an expand of a scalar, say).
constexpr int64_t kMaxFoldedBytes = int64_t{64} << 20;

// Whether every tensor input of `node` is a constant (first outputs
// only), so that it can be folded.
bool AllInputsConstant(const PassContext& ctx, const Node& node);

// Runs an op whose inputs are all constants once, now, and turns the node
// into a constant holding its first output (the caller checks that nothing
// reads the others).
absl::Status FoldNode(PassContext& ctx, int i);

// Constants the passes built with a share key (batch-norm folds) become
// the live ones other compiled graphs built from the same inputs, if any,
// before any kernel reads them; and are saved for warm starts when the
// compile persists.
void ShareDerivedConstants(PassContext& ctx);

}  // namespace kiln::runtime
