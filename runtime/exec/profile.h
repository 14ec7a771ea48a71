// Per-op execution profile, for finding where a model's time goes.
//
// Off unless the daemon runs with KILN_PROFILE=1 (read once). When on, the
// executor times every step and adds it to a process-wide table keyed by
// the op's target (KILN_PROFILE=nodes: by target and node name); kilnd
// prints the table when it shuts down. The timing
// costs two clock reads per step, so it is not left on in production.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

bool ProfilingEnabled();

// Adds one step's wall time to the target's row. Thread-safe.
void RecordStep(const std::string& target, const std::string& node_name, int64_t nanoseconds);

// The table, slowest op first, one line per target:
// "<target> calls=<n> total_ms=<t> pct=<p>". Empty when profiling is off.
std::string ProfileReport();

}  // namespace kiln::runtime
