#include "server/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace kiln::server {

LatencyHistogram::LatencyHistogram(std::vector<double> upper_bounds_s)
    : bounds_s_(std::move(upper_bounds_s)),
      counts_(new std::atomic<uint64_t>[bounds_s_.size() + 1]) {
  for (double b : bounds_s_) bounds_ns_.push_back(static_cast<int64_t>(std::llround(b * 1e9)));
  for (size_t i = 0; i <= bounds_s_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Observe(std::chrono::steady_clock::duration d) {
  const int64_t ns =
      std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
  const size_t bucket =
      std::lower_bound(bounds_ns_.begin(), bounds_ns_.end(), ns) - bounds_ns_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

HistogramSnapshot LatencyHistogram::Snapshot() const {
  HistogramSnapshot s;
  s.upper_bounds_s = bounds_s_;
  for (size_t i = 0; i <= bounds_s_.size(); ++i) {
    s.counts.push_back(counts_[i].load(std::memory_order_relaxed));
  }
  // Divided, not multiplied by 1e-9: 4426632 ns reads 0.004426632, not
  // 0.004426632000000001.
  s.sum_s = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

std::vector<double> LatencyHistogram::ExecuteBounds() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1,    2.5,    5,    10};
}

std::vector<double> LatencyHistogram::CompileBounds() {
  return {1e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
          1,    2.5,  5,     10,    30,    60,     120,    300};
}

}  // namespace kiln::server
