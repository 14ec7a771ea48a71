// Static memory planning: every intermediate tensor of a compiled graph gets
// a fixed offset in one arena, and tensors whose lifetimes do not overlap
// share bytes. Planned once at compile time; each execution then needs one
// arena allocation.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::runtime {

inline constexpr int64_t kPlanAlignment = 64;

// A buffer live from step `first` to step `last` inclusive.
struct BufferRequest {
  int64_t bytes = 0;
  int first = 0;
  int last = 0;
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // one per request, kPlanAlignment-aligned
  int64_t arena_bytes = 0;
};

// Greedy by size (largest first), each buffer at the lowest offset that
// fits between buffers live at the same time.
MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests);

}  // namespace kiln::runtime
