// Memory planning: buffers live at the same time never overlap; buffers
// that are not live together share memory.
#include "runtime/plan/memory_plan.h"

#include <random>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

TEST(MemoryPlan, DisjointLifetimesShareMemory) {
  MemoryPlan plan = PlanMemory({{1000, 0, 1}, {1000, 2, 3}, {1000, 4, 5}});
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
  EXPECT_EQ(plan.arena_bytes, 1024);
}

TEST(MemoryPlan, OffsetsAreAligned) {
  MemoryPlan plan = PlanMemory({{3, 0, 2}, {5, 1, 2}, {7, 2, 3}});
  for (int64_t off : plan.offsets) EXPECT_EQ(off % kPlanAlignment, 0);
}

TEST(MemoryPlan, LiveBuffersNeverOverlapRandomized) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> reqs;
    int n = 1 + rng() % 40;
    for (int i = 0; i < n; ++i) {
      int first = rng() % 30;
      reqs.push_back({static_cast<int64_t>(rng() % 5000), first, first + static_cast<int>(rng() % 10)});
    }
    MemoryPlan plan = PlanMemory(reqs);
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      int64_t si = (std::max<int64_t>(reqs[i].bytes, 1) + 63) / 64 * 64;
      total += si;
      EXPECT_LE(plan.offsets[i] + si, plan.arena_bytes);
      for (int j = i + 1; j < n; ++j) {
        bool live_together = reqs[i].first <= reqs[j].last && reqs[j].first <= reqs[i].last;
        if (!live_together) continue;
        int64_t sj = (std::max<int64_t>(reqs[j].bytes, 1) + 63) / 64 * 64;
        bool disjoint = plan.offsets[i] + si <= plan.offsets[j] || plan.offsets[j] + sj <= plan.offsets[i];
        ASSERT_TRUE(disjoint) << "trial " << trial << " buffers " << i << " and " << j;
      }
    }
    EXPECT_LE(plan.arena_bytes, total);
  }
}

}  // namespace
}  // namespace kiln::runtime
