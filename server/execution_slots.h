// A counting semaphore bounding how many executions run at once, so many
// clients' calls queue for the cores instead of all running on them.
//
// Thread-safe. Slot is the RAII holder.
#pragma once

#include "absl/synchronization/mutex.h"

namespace kiln::server {

class ExecutionSlots {
 public:
  explicit ExecutionSlots(int slots) : free_(slots > 0 ? slots : 1) {}

  class Slot {
   public:
    explicit Slot(ExecutionSlots* slots) : slots_(slots) { slots_->Acquire(); }
    ~Slot() { slots_->Release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    ExecutionSlots* slots_;
  };

 private:
  void Acquire() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* free) { return *free > 0; }, &free_));
    --free_;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    ++free_;
  }

  absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
