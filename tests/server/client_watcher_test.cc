// The watcher thread on its own: it keeps looking, a look that throws does
// not end it, and once Stop() returns no look runs.
#include "server/client_watcher.h"

#include <atomic>
#include <stdexcept>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace kiln::server {
namespace {

// Counts looks; a test waits on the count, not on time.
class Looks {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  void AwaitAtLeast(int n) {
    absl::MutexLock lock(&mu_);
    target_ = n;
    mu_.Await(absl::Condition(this, &Looks::Reached));
  }
  int Get() {
    absl::MutexLock lock(&mu_);
    return count_;
  }

 private:
  bool Reached() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= target_; }

  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
  int target_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(ClientWatcherTest, LooksAgainAndAgainUntilStopped) {
  Looks looks;
  ClientWatcher watcher(absl::Milliseconds(1), [&] { looks.Add(); });
  looks.AwaitAtLeast(3);
  watcher.Stop();
  const int after_stop = looks.Get();
  // Stop() joined the thread: nothing can add to the count any more.
  watcher.Stop();
  EXPECT_EQ(looks.Get(), after_stop);
}

TEST(ClientWatcherTest, ALookThatThrowsDoesNotEndTheWatcher) {
  Looks looks;
  ClientWatcher watcher(absl::Milliseconds(1), [&] {
    looks.Add();
    throw std::runtime_error("a look failed");
  });
  looks.AwaitAtLeast(3);
}

TEST(ClientWatcherTest, StopBeforeTheFirstLookEndsAtOnce) {
  std::atomic<int> looks{0};
  ClientWatcher watcher(absl::Hours(1), [&] { looks++; });
  watcher.Stop();
  EXPECT_EQ(looks.load(), 0);
}

}  // namespace
}  // namespace kiln::server
