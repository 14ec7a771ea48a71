// ParallelFor's worker slots: every body sees an index below MaxWorkers(),
// and no two bodies running at the same time share one (kernels index
// per-worker scratch by it).
#include "runtime/exec/parallel.h"

#include <atomic>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/exec/arenas.h"

namespace kiln::runtime {
namespace {

TEST(Parallel, MaxWorkersIsTheArenasConcurrency) {
  int inside = 0;
  RunInArena(3, /*shared=*/false, [&] { inside = MaxWorkers(); });
  EXPECT_EQ(inside, 3);
}

TEST(Parallel, BodiesRunningTogetherHoldDistinctSlots) {
  for (int concurrency : {1, 2, 4}) {
    RunInArena(concurrency, /*shared=*/false, [&] {
      const int workers = MaxWorkers();
      auto busy = std::make_unique<std::atomic<int>[]>(workers);
      for (int i = 0; i < workers; ++i) busy[i] = 0;
      std::atomic<int> out_of_range{0}, shared_slot{0};
      ParallelFor(20000, 1, [&](int64_t begin, int64_t end) {
        const int slot = WorkerIndex();
        if (slot < 0 || slot >= workers) {
          out_of_range++;
          return;
        }
        if (busy[slot].fetch_add(1) != 0) shared_slot++;
        volatile int64_t sum = 0;  // long enough for other bodies to overlap
        for (int64_t i = begin; i < end; ++i) {
          for (int k = 0; k < 200; ++k) sum = sum + i * k;
        }
        busy[slot].fetch_sub(1);
      });
      EXPECT_EQ(out_of_range.load(), 0) << "arena of " << concurrency;
      EXPECT_EQ(shared_slot.load(), 0) << "arena of " << concurrency;
    });
  }
}

TEST(Parallel, ABodyRunInlineOutsideAnArenaIsSlotZero) {
  int slot = -1;
  ParallelFor(1, 1, [&](int64_t, int64_t) { slot = WorkerIndex(); });
  EXPECT_EQ(slot, 0);
}

}  // namespace
}  // namespace kiln::runtime
