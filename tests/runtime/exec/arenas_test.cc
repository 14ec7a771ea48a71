// Task arenas: their concurrency is what code (oneDNN included) inside them
// sees, private arenas never make callers wait for one another, a oneDNN
// primitive run in a one-thread arena uses no other thread, and a worker
// kept warm after a run spins until the next run takes it.
#include "runtime/exec/arenas.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/exec/parallel.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime {
namespace {

TEST(Arenas, CodeInsideSeesTheArenasConcurrency) {
  int inside = 0;
  RunInArena(1, /*shared=*/false, [&] { inside = CurrentArenaConcurrency(); });
  EXPECT_EQ(inside, 1);
  RunInArena(3, /*shared=*/true, [&] { inside = CurrentArenaConcurrency(); });
  EXPECT_EQ(inside, 3);
}

// Both callers must be inside at the same time; in one shared arena of one
// thread the second would wait for the first, which waits for the second.
TEST(Arenas, PrivateArenasLetCallersRunSideBySide) {
  std::atomic<int> entered{0};
  std::atomic<bool> both{true};
  auto body = [&] {
    RunInArena(1, /*shared=*/false, [&] {
      entered++;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (entered.load() < 2) {
        if (std::chrono::steady_clock::now() > deadline) {
          both = false;
          return;
        }
        std::this_thread::yield();
      }
    });
  };
  std::thread a(body), b(body);
  a.join();
  b.join();
  EXPECT_TRUE(both.load());
}

// Nanoseconds every thread of this process has run, by thread id.
std::map<int, int64_t> ThreadRunNs() {
  std::map<int, int64_t> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/schedstat");
    int64_t ns = 0;
    if (f >> ns) out[std::atoi(e->d_name)] = ns;
  }
  closedir(dir);
  return out;
}

// CPU time other threads than the caller spent while fn ran, as a fraction
// of the caller's own.
double OtherThreadsShare(const std::function<void()>& fn) {
  const int self = static_cast<int>(syscall(SYS_gettid));
  const auto before = ThreadRunNs();
  fn();
  const auto after = ThreadRunNs();
  int64_t mine = 0, others = 0;
  for (const auto& [tid, ns] : after) {
    auto it = before.find(tid);
    const int64_t delta = ns - (it == before.end() ? 0 : it->second);
    (tid == self ? mine : others) += delta;
  }
  return mine > 0 ? static_cast<double>(others) / mine : 0.0;
}

TEST(Arenas, OneDnnUsesOnlyTheThreadsOfTheCallersArena) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
  if (ThreadRunNs().empty()) GTEST_SKIP() << "no /proc/self/task/*/schedstat";
  // ~2 GFLOP per run: tens of milliseconds, long enough to see where it ran.
  const int64_t n = 1024;
  testing::OpTester t("aten.mm.default");
  t.AddArg(t.Input(testing::F32({n, n}), testing::RandomFloats(n * n, 1)));
  t.AddArg(t.Constant(testing::F32({n, n}), testing::RandomFloats(n * n, 2)));
  // Built outside any arena: oneDNN splits the work for every core, which
  // a one-thread arena must still run on its one thread.
  ASSERT_TRUE(t.Prepare().ok());
  ASSERT_TRUE(t.Run().ok());  // warm up
  auto runs = [&] {
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(t.Run().ok());
  };
  // Other threads of the process (idle oneTBB workers, say) may run a
  // little now and then: the best of three tries counts. A primitive that
  // used the machine's threads would show in every try.
  double alone = 1.0, shared = 0.0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    alone = std::min(alone, OtherThreadsShare([&] { RunInArena(1, /*shared=*/false, runs); }));
    // The same measurement does see the second thread of a two-thread
    // arena (unless the other core was busy elsewhere the whole time).
    shared = std::max(shared, OtherThreadsShare([&] { RunInArena(2, /*shared=*/true, runs); }));
  }
  EXPECT_LT(alone, 0.05) << "other threads ran while the caller's arena had one thread";
  EXPECT_GT(shared, 0.2) << "a two-thread arena used only the caller";
}

// Runs fn in the shared two-thread arena as a parallel loop of two
// iterations that must meet: true if both ran at once (on two threads)
// within the deadline.
bool TwoThreadsMeet(bool keep_warm = true) {
  std::atomic<int> arrived{0};
  std::atomic<bool> met{true};
  RunInArena(2, /*shared=*/true, [&] {
    ParallelFor(2, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        arrived++;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (arrived.load() < 2) {
          if (std::chrono::steady_clock::now() > deadline) {
            met = false;
            return;
          }
          std::this_thread::yield();
        }
      }
    });
  }, keep_warm);
  return met.load();
}

TEST(Arenas, AWorkerKeptWarmAfterARunJoinsTheNext) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
  SetKeepWarm(10'000'000);  // spinning far longer than the test
  EXPECT_TRUE(TwoThreadsMeet());
  // The worker now spins in a task of its own; the next run must end it.
  EXPECT_TRUE(TwoThreadsMeet());
  SetKeepWarm(kDefaultKeepWarmUs);
}

TEST(Arenas, WorkersSpinAfterARunOnlyWhenKeptWarm) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
  // Kept warm: a run queues a spinner, and a worker takes it up and spins
  // (however long a busy host takes to give that worker a core).
  SetKeepWarm(300'000);
  const uint64_t before_warm = GetKeepWarmStats().queued;
  EXPECT_TRUE(TwoThreadsMeet());
  EXPECT_GT(GetKeepWarmStats().queued, before_warm);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (GetKeepWarmStats().spinning == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_GT(GetKeepWarmStats().spinning, 0) << "no worker spun after the run";
  // Not kept warm: the next run ends the spinner and queues none.
  SetKeepWarm(0);
  const uint64_t before_cold = GetKeepWarmStats().queued;
  EXPECT_TRUE(TwoThreadsMeet());
  EXPECT_EQ(GetKeepWarmStats().queued, before_cold) << "a spinner queued with keep-warm off";
  SetKeepWarm(kDefaultKeepWarmUs);
}

TEST(Arenas, ARunWhoseCallerComputesNextQueuesNoSpinner) {
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 cores";
  SetKeepWarm(300'000);
  // keep_warm = false (a channel call whose client computes next): none
  // queued although keep-warm is on; the next ordinary run queues again.
  const uint64_t before = GetKeepWarmStats().queued;
  EXPECT_TRUE(TwoThreadsMeet(/*keep_warm=*/false));
  EXPECT_EQ(GetKeepWarmStats().queued, before) << "a spinner queued after a keep_warm=false run";
  EXPECT_TRUE(TwoThreadsMeet());
  EXPECT_GT(GetKeepWarmStats().queued, before);
  SetKeepWarm(kDefaultKeepWarmUs);
}

}  // namespace
}  // namespace kiln::runtime
