// A fixed set of threads that run submitted jobs in FIFO order: where the
// daemon runs executions, so gRPC's callback threads (a handful, shared by
// every call) never block on a graph run.
//
// Thread-safe. Jobs must not throw. The destructor runs every job already
// submitted, then joins the threads.
#pragma once

#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {

class WorkQueue {
 public:
  explicit WorkQueue(int threads);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Submit(absl::AnyInvocable<void() &&> job);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Loop();

  absl::Mutex mu_;
  std::deque<absl::AnyInvocable<void() &&>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::runtime
