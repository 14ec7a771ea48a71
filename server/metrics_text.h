// kilnd's metrics in the Prometheus text exposition format (version 0.0.4),
// as served by --metrics-port (metrics_http.h). Rendering is separate from
// serving so the format can be tested without sockets.
//
// The values come from KilnService::CollectMetrics, the same counters the
// GetStats RPC reports.
#pragma once

#include <cstdint>
#include <string>

#include "server/latency_histogram.h"

namespace kiln::server {

inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

struct MetricsSnapshot {
  // Counters.
  uint64_t compiles = 0;  // graphs compiled from scratch (every cache miss)
  uint64_t memory_cache_hits = 0;
  uint64_t disk_cache_hits = 0;
  uint64_t remote_cache_hits = 0;
  uint64_t cache_misses = 0;
  // The fleet's Redis, when there is one.
  bool remote = false;
  uint64_t remote_hits = 0, remote_misses = 0, remote_refused = 0, remote_errors = 0;
  uint64_t remote_bytes_read = 0, remote_bytes_written = 0;
  uint64_t executes = 0;  // gRPC and call channel, failed ones included
  uint64_t execute_errors = 0;
  // Input bytes of executes, and of those read in place (StatsResponse).
  uint64_t input_bytes = 0;
  uint64_t input_bytes_in_place = 0;
  // Histograms.
  HistogramSnapshot execute_seconds;
  HistogramSnapshot compile_seconds;
  // Gauges.
  uint64_t constant_bytes = 0;
  uint64_t packed_weight_bytes = 0;
  uint64_t plan_bytes = 0;
  uint64_t resident_bytes = 0;
  uint64_t clients = 0;  // open sessions
  uint64_t live_graphs = 0;
  double uptime_s = 0;
};

// Every metric with its # HELP and # TYPE lines; histogram buckets
// cumulative, ending with le="+Inf", then _sum and _count.
std::string RenderMetrics(const MetricsSnapshot& m);

}  // namespace kiln::server
