// Shared arenas per concurrency and pools of private ones (see arenas.h).
#include "runtime/exec/arenas.h"

#include <map>
#include <memory>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "absl/synchronization/mutex.h"

namespace kiln::runtime {
namespace {

using oneapi::tbb::task_arena;

struct Registry {
  absl::Mutex mu;
  std::map<int, std::unique_ptr<task_arena>> shared ABSL_GUARDED_BY(mu);
  // Idle private arenas by concurrency.
  std::map<int, std::vector<std::unique_ptr<task_arena>>> idle ABSL_GUARDED_BY(mu);
};

// Leaked on purpose: arenas must outlive every thread that may still be
// running in one at exit.
Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

// Runs fn so that, while it waits inside its own parallel regions, the
// thread takes no other work: in a shared arena, another caller's whole
// run (queued there when all slots were taken) would otherwise be stolen
// and added to this caller's latency.
void Isolated(absl::FunctionRef<void()> fn) {
  oneapi::tbb::this_task_arena::isolate([&] { fn(); });
}

}  // namespace

void RunInArena(int concurrency, bool shared, absl::FunctionRef<void()> fn) {
  if (concurrency < 1) concurrency = 1;
  Registry& r = TheRegistry();
  if (shared) {
    task_arena* arena;
    {
      absl::MutexLock lock(&r.mu);
      auto& slot = r.shared[concurrency];
      if (slot == nullptr) slot = std::make_unique<task_arena>(concurrency);
      arena = slot.get();
    }
    arena->execute([&] { Isolated(fn); });
    return;
  }
  std::unique_ptr<task_arena> arena;
  {
    absl::MutexLock lock(&r.mu);
    auto& idle = r.idle[concurrency];
    if (!idle.empty()) {
      arena = std::move(idle.back());
      idle.pop_back();
    }
  }
  if (arena == nullptr) arena = std::make_unique<task_arena>(concurrency);
  arena->execute([&] { Isolated(fn); });
  absl::MutexLock lock(&r.mu);
  r.idle[concurrency].push_back(std::move(arena));
}

int CurrentArenaConcurrency() { return oneapi::tbb::this_task_arena::max_concurrency(); }

}  // namespace kiln::runtime
