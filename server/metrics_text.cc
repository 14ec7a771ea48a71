#include "server/metrics_text.h"

#include "absl/strings/str_cat.h"
#include "spdlog/fmt/fmt.h"

namespace kiln::server {
namespace {

// Shortest text that reads back as the same double ("5e-05", "0.25", "10").
std::string Number(double v) { return fmt::format("{}", v); }

void Header(std::string* out, const char* name, const char* type, const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

void Scalar(std::string* out, const char* name, const char* type, const char* help,
            const std::string& value) {
  Header(out, name, type, help);
  absl::StrAppend(out, name, " ", value, "\n");
}

void Histogram(std::string* out, const char* name, const char* help, const HistogramSnapshot& h) {
  Header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.upper_bounds_s.size() ? Number(h.upper_bounds_s[i]) : "+Inf";
    absl::StrAppend(out, name, "_bucket{le=\"", le, "\"} ", cumulative, "\n");
  }
  absl::StrAppend(out, name, "_sum ", Number(h.sum_s), "\n", name, "_count ", cumulative, "\n");
}

}  // namespace

std::string RenderMetrics(const MetricsSnapshot& m) {
  std::string out;
  Scalar(&out, "kiln_compiles_total", "counter",
         "Graphs compiled from scratch (every cache miss compiles).", absl::StrCat(m.compiles));
  Header(&out, "kiln_cache_hits_total", "counter",
         "Compile requests answered from a cache: memory (already compiled in this daemon) "
         "or disk (artifact in the cache directory) or remote (the fleet's Redis).");
  absl::StrAppend(&out, "kiln_cache_hits_total{level=\"memory\"} ", m.memory_cache_hits, "\n",
                  "kiln_cache_hits_total{level=\"disk\"} ", m.disk_cache_hits, "\n",
                  "kiln_cache_hits_total{level=\"remote\"} ", m.remote_cache_hits, "\n");
  if (m.remote) {
    Header(&out, "kiln_remote_lookups_total", "counter",
           "Values looked up in the fleet's Redis (artifacts and derived weights), by result: "
           "hit, miss, refused (not sealed under the fleet's key, or over the caps).");
    absl::StrAppend(&out, "kiln_remote_lookups_total{result=\"hit\"} ", m.remote_hits, "\n",
                    "kiln_remote_lookups_total{result=\"miss\"} ", m.remote_misses, "\n",
                    "kiln_remote_lookups_total{result=\"refused\"} ", m.remote_refused, "\n");
    Scalar(&out, "kiln_remote_errors_total", "counter",
           "Calls to the fleet's Redis that failed (down, slow, full).",
           absl::StrCat(m.remote_errors));
    Header(&out, "kiln_remote_bytes_total", "counter",
           "Bytes read from and written to the fleet's Redis.");
    absl::StrAppend(&out, "kiln_remote_bytes_total{direction=\"read\"} ", m.remote_bytes_read,
                    "\n", "kiln_remote_bytes_total{direction=\"written\"} ",
                    m.remote_bytes_written, "\n");
  }
  Scalar(&out, "kiln_cache_misses_total", "counter", "Compile requests no cache could answer.",
         absl::StrCat(m.cache_misses));
  Scalar(&out, "kiln_executes_total", "counter",
         "Execute calls, over gRPC and call channels, failed ones included.",
         absl::StrCat(m.executes));
  Scalar(&out, "kiln_execute_errors_total", "counter", "Execute calls that failed.",
         absl::StrCat(m.execute_errors));
  Header(&out, "kiln_input_bytes_total", "counter",
         "Bytes of execute inputs: copied into the client's arena for the call, or read in "
         "place where an earlier call's output lies.");
  absl::StrAppend(&out, "kiln_input_bytes_total{where=\"copied\"} ",
                  m.input_bytes - m.input_bytes_in_place, "\n",
                  "kiln_input_bytes_total{where=\"in_place\"} ", m.input_bytes_in_place, "\n");
  Histogram(&out, "kiln_execute_seconds",
            "Time the daemon spent on an Execute call, from receiving it to the reply "
            "(validation, waiting for a thread, the run).",
            m.execute_seconds);
  Histogram(&out, "kiln_compile_seconds",
            "Time of compile requests that returned a graph, cache hits included.",
            m.compile_seconds);
  Scalar(&out, "kiln_constant_bytes", "gauge",
         "Bytes of constants (weights) the daemon holds.", absl::StrCat(m.constant_bytes));
  Scalar(&out, "kiln_packed_weight_bytes", "gauge",
         "Bytes of weights in kernels' packed layouts, each shared packing counted once.",
         absl::StrCat(m.packed_weight_bytes));
  Scalar(&out, "kiln_plan_bytes", "gauge",
         "Run memory of live compiled graphs: planned intermediates and scratch, times "
         "their pooled arenas.",
         absl::StrCat(m.plan_bytes));
  Scalar(&out, "kiln_resident_bytes", "gauge", "The daemon's resident set size (VmRSS).",
         absl::StrCat(m.resident_bytes));
  Scalar(&out, "kiln_clients", "gauge", "Open client sessions.", absl::StrCat(m.clients));
  Scalar(&out, "kiln_live_graphs", "gauge", "Compiled graphs some client handle holds.",
         absl::StrCat(m.live_graphs));
  Scalar(&out, "kiln_uptime_seconds", "gauge", "Seconds since the daemon started.",
         Number(m.uptime_s));
  return out;
}

}  // namespace kiln::server
