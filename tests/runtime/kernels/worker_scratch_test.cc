// WorkerScratch: one slice per thread of the arena the kernel was prepared
// in, placed after the kernel's other scratch, and a clear error instead of
// shared slices when a run's arena is wider.
#include "runtime/kernels/worker_scratch.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "gtest/gtest.h"
#include "runtime/exec/parallel.h"

namespace kiln::runtime {
namespace {

// The kernels layer sits below the executor's arenas: a plain oneTBB arena.
template <typename Fn>
void InArena(int concurrency, Fn&& fn) {
  oneapi::tbb::task_arena arena(concurrency);
  arena.execute(fn);
}

TEST(WorkerScratch, AlignedDisjointSlicesWithinTheKernelsScratch) {
  InArena(3, [&] {
    constexpr size_t kOffset = 128, kBytes = 100;
    const WorkerScratch ws(kOffset, kBytes);
    EXPECT_EQ(ws.End(), kOffset + ws.Bytes());
    std::vector<unsigned char> run(ws.End());
    std::vector<std::atomic<int64_t>> start(3);
    for (auto& s : start) s = -1;
    ParallelFor(3000, 1, [&](int64_t, int64_t) {
      start[WorkerIndex()] = ws.Mine<unsigned char>(run.data()) - run.data();
    });
    int seen = 0;
    for (int slot = 0; slot < 3; ++slot) {
      const int64_t at = start[slot];
      if (at < 0) continue;  // no chunk ran on this thread
      ++seen;
      EXPECT_GE(at, static_cast<int64_t>(kOffset)) << slot;
      EXPECT_EQ(at % 64, 0) << slot;
      EXPECT_LE(static_cast<size_t>(at) + kBytes, ws.End()) << slot;
      for (int other = 0; other < slot; ++other) {
        if (start[other] >= 0) {
          EXPECT_GE(std::llabs(at - start[other]), int64_t{kBytes});
        }
      }
    }
    EXPECT_GE(seen, 1);
  });
}

TEST(WorkerScratch, EachThreadWritesOnlyItsOwnSlice) {
  InArena(4, [&] {
    const WorkerScratch ws(64, 16 * sizeof(int64_t));
    ASSERT_TRUE(ws.CheckArena().ok());
    std::vector<unsigned char> run_scratch(ws.End(), 0xAB);
    std::atomic<int> torn{0};
    ParallelFor(4096, 1, [&](int64_t begin, int64_t end) {
      int64_t* mine = ws.Mine<int64_t>(run_scratch.data());
      for (int64_t i = begin; i < end; ++i) {
        for (int k = 0; k < 16; ++k) mine[k] = i;
        for (int k = 0; k < 16; ++k) {
          if (mine[k] != i) torn++;
        }
      }
    });
    EXPECT_EQ(torn.load(), 0);
    // The bytes before the slices (the kernel's own scratch) are untouched.
    for (size_t b = 0; b < 64; ++b) ASSERT_EQ(run_scratch[b], 0xAB) << b;
  });
}

TEST(WorkerScratch, ARunInAWiderArenaIsRefused) {
  WorkerScratch narrow;
  InArena(1, [&] { narrow = WorkerScratch(0, 256); });
  absl::Status same, wider;
  InArena(1, [&] { same = narrow.CheckArena(); });
  InArena(3, [&] { wider = narrow.CheckArena(); });
  EXPECT_TRUE(same.ok()) << same;
  EXPECT_EQ(wider.code(), absl::StatusCode::kInternal) << wider;
  EXPECT_NE(wider.message().find("arena of 3"), std::string::npos) << wider;
}

TEST(WorkerScratch, NoBytesNeedNoCheck) {
  WorkerScratch none;
  InArena(1, [&] { none = WorkerScratch(0, 0); });
  absl::Status status;
  InArena(3, [&] { status = none.CheckArena(); });
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(none.Bytes(), 0u);
  EXPECT_EQ(none.End(), 0u);
}

}  // namespace
}  // namespace kiln::runtime
