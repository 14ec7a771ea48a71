// WorkerScratch: one slice per thread of the arena the kernel was prepared
// in, placed after the kernel's other scratch, and a clear error instead of
// shared slices when a run's arena is wider.
#include "runtime/kernels/worker_scratch.h"

#include <atomic>
#include <cstdint>
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

TEST(WorkerScratch, OneAlignedSlicePerWorkerAfterTheOffset) {
  InArena(3, [&] {
    const WorkerScratch ws(128, 100);
    EXPECT_EQ(ws.offset(), 128u);
    EXPECT_EQ(ws.Bytes(), 3u * 128u);  // 100 bytes rounded up to 64's multiple
    EXPECT_EQ(ws.End(), 128u + 3u * 128u);
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
    for (size_t b = 0; b < ws.offset(); ++b) ASSERT_EQ(run_scratch[b], 0xAB) << b;
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
}

}  // namespace
}  // namespace kiln::runtime
