#include "runtime/exec/parallel.h"

#include <algorithm>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

namespace kiln::runtime {

void ParallelFor(int64_t n, int64_t grain,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  if (n <= grain) {
    fn(0, n);
    return;
  }
  oneapi::tbb::parallel_for(
      oneapi::tbb::blocked_range<int64_t>(0, n, grain),
      [&fn](const oneapi::tbb::blocked_range<int64_t>& r) {
        fn(r.begin(), r.end());
      });
}

int MaxWorkers() { return oneapi::tbb::this_task_arena::max_concurrency(); }

int WorkerIndex() {
  // A thread that has not entered an arena (a body run inline by a caller
  // outside one) is alone in its ParallelFor: slot 0.
  return std::max(oneapi::tbb::this_task_arena::current_thread_index(), 0);
}

}  // namespace kiln::runtime
