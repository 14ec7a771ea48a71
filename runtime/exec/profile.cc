#include "runtime/exec/profile.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {
namespace {

struct Row {
  int64_t calls = 0;
  int64_t nanoseconds = 0;
};

absl::Mutex g_mu;
absl::flat_hash_map<std::string, Row>* g_rows = new absl::flat_hash_map<std::string, Row>();

// 0: off, 1: by target, 2: by target and node.
int Level() {
  static const int level = [] {
    const char* v = std::getenv("KILN_PROFILE");
    if (v == nullptr || std::strcmp(v, "") == 0 || std::strcmp(v, "0") == 0) return 0;
    return std::strcmp(v, "nodes") == 0 ? 2 : 1;
  }();
  return level;
}

}  // namespace

bool ProfilingEnabled() { return Level() > 0; }

void RecordStep(const std::string& target, const std::string& node_name, int64_t nanoseconds) {
  absl::MutexLock lock(&g_mu);
  Row& row = (*g_rows)[Level() == 2 ? target + " " + node_name : target];
  row.calls += 1;
  row.nanoseconds += nanoseconds;
}

std::string ProfileReport() {
  std::vector<std::pair<std::string, Row>> rows;
  {
    absl::MutexLock lock(&g_mu);
    rows.assign(g_rows->begin(), g_rows->end());
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.nanoseconds > b.second.nanoseconds; });
  int64_t total = 0;
  for (const auto& r : rows) total += r.second.nanoseconds;
  std::string out;
  for (const auto& [target, row] : rows) {
    absl::StrAppendFormat(&out, "%-40s calls=%-8d total_ms=%-10.2f pct=%.1f\n", target, row.calls,
                          row.nanoseconds / 1e6, total > 0 ? 100.0 * row.nanoseconds / total : 0.0);
  }
  return out;
}

}  // namespace kiln::runtime
