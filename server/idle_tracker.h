// IdleTracker: how long kilnd has gone without calls in flight, for
// --idle-exit-min. Open sessions are the service's to count
// (KilnService::BeginIdleShutdown); this tracks calls and the moments the
// daemon was last in use.
//
// Thread-safe and lock-free: a call pays an atomic add on the way in, and
// a clock read, a relaxed store and an atomic add on the way out.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kiln::server {

class IdleTracker {
 public:
  using Clock = std::chrono::steady_clock;

  IdleTracker() { Touch(); }

  // One call in flight for the guard's lifetime; movable (an Execute hands
  // it to the thread that finishes the call).
  class Call {
   public:
    explicit Call(IdleTracker* tracker) : tracker_(tracker) {
      tracker_->in_flight_.fetch_add(1, std::memory_order_relaxed);
    }
    Call(Call&& other) noexcept : tracker_(other.tracker_) { other.tracker_ = nullptr; }
    Call& operator=(Call&&) = delete;
    Call(const Call&) = delete;
    ~Call() {
      if (tracker_ == nullptr) return;
      // Stamped before the count drops: IdleFor never sees no call in
      // flight with the time of a use long before this one.
      tracker_->Touch();
      tracker_->in_flight_.fetch_sub(1);
    }

   private:
    IdleTracker* tracker_;
  };

  Call Begin() { return Call(this); }
  // The daemon was in use until now (e.g. a session just closed).
  void Touch() {
    last_use_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  // Time since the last Touch or the end of the last call; zero while a
  // call is in flight.
  Clock::duration IdleFor() const {
    if (in_flight_.load() != 0) return Clock::duration::zero();
    const Clock::duration since =
        Clock::now().time_since_epoch() - Clock::duration(last_use_.load());
    return since > Clock::duration::zero() ? since : Clock::duration::zero();
  }

 private:
  std::atomic<int64_t> in_flight_{0};
  std::atomic<Clock::rep> last_use_{0};
};

}  // namespace kiln::server
