// Compile-time constant folding: every op whose value depends on
// constants alone (weights, and ops that read no tensor: aranges, fills)
// runs once, while compiling, however long the chain. Only the values a
// run reads become constants, shared (by a key naming how they were
// computed) with every other graph that folds the same, and saved for
// warm starts; the chain's intermediates live only while it is computed.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/ir/graph.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {

// Largest constant a compile-time fold may create; folding must not turn a
// small graph into a huge artifact (an expand of a scalar, say).
constexpr int64_t kMaxFoldedBytes = int64_t{64} << 20;

// Largest op reading no tensor (a fill, an arange) that becomes a constant
// when the run reads it directly: a fill costs a run no more than reading
// a constant would, so a large one is folded only into what it feeds.
constexpr int64_t kMaxFoldedSourceBytes = int64_t{64} << 10;

// Folds every op whose tensor inputs are constants or folded ops (first
// outputs only, the others unread), whose result fits kMaxFoldedBytes and
// which has no side effects (ops.def: every other kernel is a function of
// its arguments). The values read by ops that stay, or by the graph's
// outputs, become constant nodes; the chains behind them become dead.
absl::Status FoldConstants(PassContext& ctx);

// Constants the passes built with a share key (batch-norm folds) become
// the live ones other compiled graphs built from the same inputs, if any,
// before any kernel reads them; and are saved for warm starts when the
// compile persists.
void ShareDerivedConstants(PassContext& ctx);

}  // namespace kiln::runtime
