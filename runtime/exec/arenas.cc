// Shared arenas per concurrency and pools of private ones (see arenas.h).
#include "runtime/exec/arenas.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "absl/synchronization/mutex.h"

namespace kiln::runtime {
namespace {

using oneapi::tbb::task_arena;

// A shared arena and what keeps its workers warm between runs.
struct SharedArena {
  explicit SharedArena(int concurrency) : arena(concurrency), concurrency(concurrency) {}
  task_arena arena;
  const int concurrency;
  // Bumped as each run enters; a keep-warm spinner stops when it changes.
  std::atomic<uint64_t> epoch{0};
  std::atomic<int> spinners{0};
};

struct Registry {
  absl::Mutex mu;
  std::map<int, std::unique_ptr<SharedArena>> shared ABSL_GUARDED_BY(mu);
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

// After a run, the arena's workers spin (each in a task of its own) until
// the next run enters or the keep-warm time has passed, instead of going
// to sleep.
// A client calling in a loop spends the time between its calls in Python
// (Dynamo's guards, copying inputs), on one core; a worker asleep in that
// gap wakes for the next run only after its first parallel regions have
// run on the calling thread alone, so the start of every run (in a CNN, its
// large early layers) goes at the speed of one thread. ONNX Runtime's pool
// spins between runs for the same reason.
std::atomic<int64_t> g_keep_warm_us{kDefaultKeepWarmUs};
// Spinner tasks queued since start, and those spinning now (KeepWarmStats).
std::atomic<uint64_t> g_spinners_queued{0};
std::atomic<int> g_spinning{0};

void KeepWarm(SharedArena& a) {
  const int64_t keep_warm_us = g_keep_warm_us.load(std::memory_order_relaxed);
  if (a.concurrency < 2 || keep_warm_us <= 0) return;
  const int want = a.concurrency - 1;
  int have = a.spinners.load(std::memory_order_relaxed);
  while (have < want) {
    if (!a.spinners.compare_exchange_weak(have, have + 1)) continue;
    const uint64_t seen = a.epoch.load(std::memory_order_relaxed);
    g_spinners_queued.fetch_add(1, std::memory_order_relaxed);
    a.arena.enqueue([&a, seen, keep_warm_us] {
      g_spinning.fetch_add(1, std::memory_order_relaxed);
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::microseconds(keep_warm_us);
      int polls = 0;
      while (a.epoch.load(std::memory_order_relaxed) == seen) {
        _mm_pause();
        if (++polls % 256 == 0 && std::chrono::steady_clock::now() >= deadline) break;
      }
      g_spinning.fetch_sub(1, std::memory_order_relaxed);
      a.spinners.fetch_sub(1, std::memory_order_relaxed);
    });
    ++have;
  }
}

}  // namespace

void RunInArena(int concurrency, bool shared, absl::FunctionRef<void()> fn, bool keep_warm) {
  if (concurrency < 1) concurrency = 1;
  Registry& r = TheRegistry();
  if (shared) {
    SharedArena* shared_arena;
    {
      absl::MutexLock lock(&r.mu);
      auto& slot = r.shared[concurrency];
      if (slot == nullptr) slot = std::make_unique<SharedArena>(concurrency);
      shared_arena = slot.get();
    }
    shared_arena->epoch.fetch_add(1, std::memory_order_relaxed);
    shared_arena->arena.execute([&] { Isolated(fn); });
    if (keep_warm) KeepWarm(*shared_arena);
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

KeepWarmStats GetKeepWarmStats() {
  return KeepWarmStats{g_spinners_queued.load(std::memory_order_relaxed),
                       g_spinning.load(std::memory_order_relaxed)};
}

void SetKeepWarm(int64_t microseconds) {
  g_keep_warm_us.store(std::max<int64_t>(microseconds, 0), std::memory_order_relaxed);
}

int CurrentArenaConcurrency() { return oneapi::tbb::this_task_arena::max_concurrency(); }

}  // namespace kiln::runtime
