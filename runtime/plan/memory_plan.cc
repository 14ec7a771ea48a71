#include "runtime/plan/memory_plan.h"

#include <algorithm>
#include <numeric>

namespace kiln::runtime {
namespace {

int64_t AlignUp(int64_t n) {
  return (n + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
}

bool Overlaps(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests) {
  const int n = static_cast<int>(requests.size());
  MemoryPlan plan;
  plan.offsets.assign(n, -1);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return requests[a].bytes > requests[b].bytes;
  });
  std::vector<int> placed;
  for (int idx : order) {
    const BufferRequest& req = requests[idx];
    const int64_t size = AlignUp(std::max<int64_t>(req.bytes, 1));
    // Intervals [offset, offset+size) of placed buffers live at the same time.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int p : placed) {
      if (Overlaps(req, requests[p])) {
        busy.emplace_back(plan.offsets[p],
                          plan.offsets[p] + AlignUp(std::max<int64_t>(requests[p].bytes, 1)));
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t candidate = 0;
    for (const auto& [begin, end] : busy) {
      if (candidate + size <= begin) break;
      candidate = std::max(candidate, end);
    }
    plan.offsets[idx] = candidate;
    plan.arena_bytes = std::max(plan.arena_bytes, candidate + size);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace kiln::runtime
