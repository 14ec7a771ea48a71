// WorkQueue (see work_queue.h).
#include "runtime/exec/work_queue.h"

#include <algorithm>
#include <utility>

namespace kiln::runtime {

WorkQueue::WorkQueue(int threads) {
  threads = std::max(threads, 1);
  threads_.reserve(threads);
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void WorkQueue::Submit(absl::AnyInvocable<void() &&> job) {
  absl::MutexLock lock(&mu_);
  jobs_.push_back(std::move(job));
}

void WorkQueue::Loop() {
  for (;;) {
    absl::AnyInvocable<void() &&> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !jobs_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (jobs_.empty()) return;  // stopping, and nothing left to run
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    std::move(job)();
  }
}

}  // namespace kiln::runtime
