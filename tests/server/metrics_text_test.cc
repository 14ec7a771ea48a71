// The Prometheus text kilnd serves: every line a valid sample, # HELP and
// # TYPE before each family, histogram buckets cumulative up to +Inf with
// _count equal to the +Inf bucket and _sum the seconds observed.
#include "server/metrics_text.h"

#include <chrono>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

MetricsSnapshot Sample() {
  LatencyHistogram exec(LatencyHistogram::ExecuteBounds());
  for (microseconds d : {microseconds(20), microseconds(50), microseconds(70), microseconds(3000),
                        microseconds(30'000'000)}) {
    exec.Observe(d);
  }
  LatencyHistogram compile(LatencyHistogram::CompileBounds());
  compile.Observe(milliseconds(40));
  MetricsSnapshot m;
  m.compiles = 3;
  m.memory_cache_hits = 4;
  m.disk_cache_hits = 5;
  m.cache_misses = 3;
  m.executes = 5;
  m.execute_errors = 1;
  m.input_bytes = 3000;
  m.input_bytes_in_place = 1000;
  m.execute_seconds = exec.Snapshot();
  m.compile_seconds = compile.Snapshot();
  m.constant_bytes = 1 << 20;
  m.packed_weight_bytes = 2 << 20;
  m.plan_bytes = 4096;
  m.resident_bytes = 123456789;
  m.clients = 2;
  m.live_graphs = 7;
  m.uptime_s = 12.5;
  return m;
}

// name{labels} -> value, for every sample line.
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

TEST(MetricsTextTest, EveryLineIsACommentOrAValidSample) {
  const std::string text = RenderMetrics(Sample());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  // The exposition format's grammar: a metric name, optional labels with
  // quoted values, one space, a float (or +Inf/NaN).
  const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")*\})? [-+]?([0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|Inf|NaN)$)");
  const std::regex help(R"(^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* [^\n]+$)");
  const std::regex type(R"(^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram)$)");
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_TRUE(std::regex_match(line, sample) || std::regex_match(line, help) ||
                std::regex_match(line, type))
        << line;
  }
}

TEST(MetricsTextTest, EachFamilyHasHelpThenTypeBeforeItsSamples) {
  const std::string text = RenderMetrics(Sample());
  const std::map<std::string, std::string> families = {
      {"kiln_compiles_total", "counter"},      {"kiln_cache_hits_total", "counter"},
      {"kiln_cache_misses_total", "counter"},  {"kiln_executes_total", "counter"},
      {"kiln_execute_errors_total", "counter"}, {"kiln_execute_seconds", "histogram"},
      {"kiln_input_bytes_total", "counter"},
      {"kiln_compile_seconds", "histogram"},   {"kiln_constant_bytes", "gauge"},
      {"kiln_packed_weight_bytes", "gauge"},   {"kiln_plan_bytes", "gauge"},
      {"kiln_resident_bytes", "gauge"},        {"kiln_clients", "gauge"},
      {"kiln_live_graphs", "gauge"},           {"kiln_uptime_seconds", "gauge"}};
  for (const auto& [name, type] : families) {
    const size_t h = text.find("# HELP " + name + " ");
    const size_t t = text.find("# TYPE " + name + " " + type + "\n");
    ASSERT_NE(h, std::string::npos) << name;
    ASSERT_NE(t, std::string::npos) << name;
    EXPECT_LT(h, t) << name;
    // The first sample of the family comes after both.
    const size_t first = text.find("\n" + name, t);
    ASSERT_NE(first, std::string::npos) << name;
    // Only one HELP per family.
    EXPECT_EQ(text.find("# HELP " + name + " ", h + 1), std::string::npos) << name;
  }
}

TEST(MetricsTextTest, CountersAndGaugesCarryTheSnapshotsValues) {
  const auto s = Samples(RenderMetrics(Sample()));
  EXPECT_EQ(s.at("kiln_compiles_total"), "3");
  EXPECT_EQ(s.at("kiln_cache_hits_total{level=\"memory\"}"), "4");
  EXPECT_EQ(s.at("kiln_cache_hits_total{level=\"disk\"}"), "5");
  EXPECT_EQ(s.at("kiln_cache_misses_total"), "3");
  EXPECT_EQ(s.at("kiln_executes_total"), "5");
  EXPECT_EQ(s.at("kiln_execute_errors_total"), "1");
  EXPECT_EQ(s.at("kiln_input_bytes_total{where=\"copied\"}"), "2000");
  EXPECT_EQ(s.at("kiln_input_bytes_total{where=\"in_place\"}"), "1000");
  EXPECT_EQ(s.at("kiln_constant_bytes"), "1048576");
  EXPECT_EQ(s.at("kiln_packed_weight_bytes"), "2097152");
  EXPECT_EQ(s.at("kiln_plan_bytes"), "4096");
  EXPECT_EQ(s.at("kiln_resident_bytes"), "123456789");
  EXPECT_EQ(s.at("kiln_clients"), "2");
  EXPECT_EQ(s.at("kiln_live_graphs"), "7");
  EXPECT_EQ(s.at("kiln_uptime_seconds"), "12.5");
}

TEST(MetricsTextTest, HistogramBucketsAreCumulativeEndingInInfWithCountAndSum) {
  const std::string text = RenderMetrics(Sample());
  const auto s = Samples(text);
  // 20 us and 50 us fall in le=5e-05 (a bound is inclusive), 70 us in
  // 1e-4, 3 ms in 5e-3, 30 s past the last bound (10 s) in +Inf only.
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"5e-05\"}"), "2");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"0.0001\"}"), "3");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"0.0025\"}"), "3");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"0.005\"}"), "4");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"10\"}"), "4");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"+Inf\"}"), "5");
  EXPECT_EQ(s.at("kiln_execute_seconds_count"), "5");
  EXPECT_NEAR(std::stod(s.at("kiln_execute_seconds_sum")), 30.00314, 1e-9);
  EXPECT_EQ(s.at("kiln_compile_seconds_bucket{le=\"0.025\"}"), "0");
  EXPECT_EQ(s.at("kiln_compile_seconds_bucket{le=\"0.05\"}"), "1");
  EXPECT_EQ(s.at("kiln_compile_seconds_count"), "1");
  // Bucket lines in ascending le order, never decreasing, +Inf last.
  for (const std::string name : {"kiln_execute_seconds", "kiln_compile_seconds"}) {
    std::istringstream in(text);
    std::string line;
    double last_le = -1;
    uint64_t last_count = 0;
    int buckets = 0;
    bool saw_inf = false;
    while (std::getline(in, line)) {
      if (line.rfind(name + "_bucket{le=\"", 0) != 0) continue;
      ASSERT_FALSE(saw_inf) << "bucket after +Inf: " << line;
      const size_t q = line.find('"') + 1;
      const std::string le = line.substr(q, line.find('"', q) - q);
      const uint64_t count = std::stoull(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(count, last_count) << line;
      last_count = count;
      ++buckets;
      if (le == "+Inf") {
        saw_inf = true;
        continue;
      }
      EXPECT_GT(std::stod(le), last_le) << line;
      last_le = std::stod(le);
    }
    EXPECT_TRUE(saw_inf) << name;
    EXPECT_EQ(std::to_string(last_count), s.at(name + "_count"));
    EXPECT_GE(buckets, 15) << name;
  }
}

TEST(MetricsTextTest, ExecuteBucketsRunFromFiftyMicrosecondsToTenSeconds) {
  const std::vector<double> b = LatencyHistogram::ExecuteBounds();
  ASSERT_FALSE(b.empty());
  EXPECT_DOUBLE_EQ(b.front(), 50e-6);
  EXPECT_DOUBLE_EQ(b.back(), 10.0);
  EXPECT_TRUE(std::is_sorted(b.begin(), b.end()));
  const std::vector<double> c = LatencyHistogram::CompileBounds();
  EXPECT_TRUE(std::is_sorted(c.begin(), c.end()));
}

TEST(MetricsTextTest, AnEmptySnapshotRendersZeroes) {
  MetricsSnapshot m;
  m.execute_seconds = LatencyHistogram(LatencyHistogram::ExecuteBounds()).Snapshot();
  m.compile_seconds = LatencyHistogram(LatencyHistogram::CompileBounds()).Snapshot();
  const auto s = Samples(RenderMetrics(m));
  EXPECT_EQ(s.at("kiln_execute_seconds_count"), "0");
  EXPECT_EQ(s.at("kiln_execute_seconds_sum"), "0");
  EXPECT_EQ(s.at("kiln_execute_seconds_bucket{le=\"+Inf\"}"), "0");
  EXPECT_EQ(s.at("kiln_uptime_seconds"), "0");
}

}  // namespace
}  // namespace kiln::server
