// LatencyHistogram: counts of durations in fixed buckets, for the
// Prometheus histograms of --metrics-port (metrics_text.h).
//
// Thread-safe and lock-free: Observe costs a short search of the bounds and
// two relaxed atomic adds, cheap next to even the shortest execute. A
// snapshot taken while observations land may see a bucket count and the sum
// from slightly different moments; the count it reports is the buckets'
// total, so _count always equals the +Inf bucket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::server {

struct HistogramSnapshot {
  std::vector<double> upper_bounds_s;  // ascending, finite; +Inf implied
  // One per bound, then the +Inf bucket; each counts only its own range
  // (not cumulative).
  std::vector<uint64_t> counts;
  double sum_s = 0;
};

class LatencyHistogram {
 public:
  // `upper_bounds_s`: ascending bucket bounds in seconds; a duration equal
  // to a bound falls in that bound's bucket (Prometheus' "le").
  explicit LatencyHistogram(std::vector<double> upper_bounds_s);

  void Observe(std::chrono::steady_clock::duration d);
  HistogramSnapshot Snapshot() const;

  // Executes: 50 us to 10 s. Compiles: 1 ms to 5 min.
  static std::vector<double> ExecuteBounds();
  static std::vector<double> CompileBounds();

 private:
  std::vector<double> bounds_s_;
  std::vector<int64_t> bounds_ns_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds + 1
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace kiln::server
