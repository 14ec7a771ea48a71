// WorkQueue: every job runs, on as many threads as it was given, and the
// destructor drains what is queued.
#include "runtime/exec/work_queue.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

TEST(WorkQueue, RunsEveryJobSubmittedFromManyThreads) {
  std::atomic<int> done{0};
  {
    WorkQueue q(3);
    std::vector<std::thread> submitters;
    for (int t = 0; t < 4; ++t) {
      submitters.emplace_back([&] {
        for (int i = 0; i < 50; ++i) q.Submit([&] { done++; });
      });
    }
    for (auto& s : submitters) s.join();
  }  // the destructor runs what is still queued
  EXPECT_EQ(done.load(), 200);
}

TEST(WorkQueue, RunsJobsConcurrentlyOnItsThreads) {
  WorkQueue q(2);
  std::atomic<int> inside{0};
  std::atomic<int> met{0};
  for (int i = 0; i < 2; ++i) {
    q.Submit([&] {
      inside++;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (inside.load() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      if (inside.load() == 2) met++;
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (met.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(met.load(), 2);
}

TEST(WorkQueue, MovesMoveOnlyJobs) {
  std::atomic<int> value{0};
  {
    WorkQueue q(1);
    auto owned = std::make_unique<int>(7);
    q.Submit([p = std::move(owned), &value] { value = *p; });
  }
  EXPECT_EQ(value.load(), 7);
}

}  // namespace
}  // namespace kiln::runtime
