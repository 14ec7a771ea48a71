// LatencyHistogram: bucket edges are inclusive upper bounds, durations past
// the last bound land in +Inf, and concurrent observers lose nothing.
#include "server/latency_histogram.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using std::chrono::microseconds;

TEST(LatencyHistogramTest, BoundsAreInclusiveAndOverflowGoesToInf) {
  LatencyHistogram h({1e-3, 1e-2});
  h.Observe(microseconds(1000));   // == 1 ms: first bucket
  h.Observe(microseconds(1001));   // second
  h.Observe(microseconds(50'000)); // past 10 ms: +Inf
  h.Observe(std::chrono::steady_clock::duration(-5));  // a clock step back counts as 0
  const HistogramSnapshot s = h.Snapshot();
  ASSERT_EQ(s.counts.size(), 3u);
  EXPECT_EQ(s.counts[0], 2u);
  EXPECT_EQ(s.counts[1], 1u);
  EXPECT_EQ(s.counts[2], 1u);
  EXPECT_NEAR(s.sum_s, 0.052001, 1e-12);
}

TEST(LatencyHistogramTest, ConcurrentObservationsAreAllCounted) {
  LatencyHistogram h(LatencyHistogram::ExecuteBounds());
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Observe(microseconds(10 + (i % 7) * 100 * (t + 1)));
    });
  }
  for (auto& t : threads) t.join();
  const HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(std::accumulate(s.counts.begin(), s.counts.end(), uint64_t{0}),
            uint64_t{kThreads} * kEach);
}

}  // namespace
}  // namespace kiln::server
