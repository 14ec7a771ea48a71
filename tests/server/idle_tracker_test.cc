// IdleTracker: idle time is zero while a call is in flight and counts from
// the end of the last call or the last Touch.
#include "server/idle_tracker.h"

#include <chrono>
#include <thread>
#include <utility>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using std::chrono::milliseconds;

TEST(IdleTrackerTest, ACallInFlightIsNeverIdle) {
  IdleTracker t;
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_GE(t.IdleFor(), milliseconds(20));
  {
    IdleTracker::Call call = t.Begin();
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(t.IdleFor(), IdleTracker::Clock::duration::zero());
    IdleTracker::Call moved = std::move(call);  // handed to another thread
    EXPECT_EQ(t.IdleFor(), IdleTracker::Clock::duration::zero());
  }
  // Counted from the call's end (from before it, it would be 40+ ms).
  EXPECT_LT(t.IdleFor(), milliseconds(40));
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_GE(t.IdleFor(), milliseconds(20));
}

TEST(IdleTrackerTest, TouchRestartsTheIdleTime) {
  IdleTracker t;
  std::this_thread::sleep_for(milliseconds(100));
  t.Touch();
  EXPECT_LT(t.IdleFor(), milliseconds(100));
}

}  // namespace
}  // namespace kiln::server
