// Runs compiled graphs. The executor owns the runtime's threads: one oneTBB
// task arena shared by every execution, so concurrent clients share the
// cores instead of each bringing a pool (oneDNN runs on the same oneTBB).
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

// Sets the number of worker threads (0: all cores). Call before the first
// Execute; later calls are ignored.
void ConfigureThreads(int num_threads);
int ConfiguredThreads();

// Runs `graph` with `inputs[i]` pointing at dense data of input_metas[i] and
// `outputs[i]` at room for output_metas[i]. Thread-safe; the caller has
// bounds-checked every pointer.
absl::Status Execute(const CompiledGraph& graph,
                     absl::Span<const void* const> inputs,
                     absl::Span<void* const> outputs);

}  // namespace kiln::runtime
