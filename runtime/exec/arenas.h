// The oneTBB task arenas executions run in, created lazily and kept for the
// life of the process. oneDNN on oneTBB sizes its parallel regions by the
// arena of the calling thread (tbb::this_task_arena::max_concurrency()), so
// the arena a graph runs in bounds every thread its kernels use, oneDNN's
// included.
//
// Thread-safe. Only the executor (exec/executor.cc) enters arenas; kernels
// describe parallel work with ParallelFor (exec/parallel.h).
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace kiln::runtime {

// Runs fn on the calling thread inside a task arena of `concurrency`
// threads (the caller counts as one) and returns when fn has returned.
//
// shared: every caller of this concurrency enters the same arena, so
// concurrent callers split its threads between them (never more than
// `concurrency` busy together). Otherwise the caller gets an arena of its
// own for the call (from a pool that grows to the number of concurrent
// callers), so concurrent callers never wait for one another. Either way fn
// runs isolated: while waiting inside its own parallel regions the thread
// never picks up another caller's run.
//
// keep_warm = false: no keep-warm spin after this run (below), for a caller
// that knows the next work is not the daemon's.
void RunInArena(int concurrency, bool shared, absl::FunctionRef<void()> fn,
                bool keep_warm = true);

// How long, after a run in a shared arena of two or more threads, its
// workers spin waiting for the next run instead of sleeping (0: they sleep
// at once, as oneTBB's do). A worker asleep when a run starts joins it
// only after its first parallel regions have run on the calling thread
// alone. Default kDefaultKeepWarmUs; kilnd --spin-us sets it.
inline constexpr int64_t kDefaultKeepWarmUs = 2000;
void SetKeepWarm(int64_t microseconds);

// What keep-warm did, process-wide: spinner tasks queued after runs since
// the start, and how many are spinning now (their worker picked them up).
struct KeepWarmStats {
  uint64_t queued = 0;
  int spinning = 0;
};
KeepWarmStats GetKeepWarmStats();

// The concurrency of the arena the calling thread is in (outside any: the
// process default); what oneDNN sees as its thread count there.
int CurrentArenaConcurrency();

}  // namespace kiln::runtime
