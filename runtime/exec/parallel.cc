#include "runtime/exec/parallel.h"

#include <algorithm>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

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

}  // namespace kiln::runtime
