// Where executions run: the arena each compile option asks for, and the
// one-thread choice for small graphs under the latency hint.
#include "runtime/exec/executor.h"

#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/ir/from_proto.h"
#include "runtime/util/sha256.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;

CompileOptions Options(int num_threads, ExecutionHint hint) {
  CompileOptions o;
  o.num_threads = num_threads;
  o.hint = hint;
  return o;
}

TEST(Executor, ArenaFollowsTheCompileOptions) {
  const int cap = ConfiguredThreads();
  ArenaChoice latency = ArenaFor(CompileOptions());
  EXPECT_EQ(latency.concurrency, cap);
  EXPECT_TRUE(latency.shared);
  ArenaChoice one = ArenaFor(Options(1, ExecutionHint::kLatency));
  EXPECT_EQ(one.concurrency, 1);
  EXPECT_TRUE(one.shared);
  // A graph never gets more threads than the daemon has.
  EXPECT_EQ(ArenaFor(Options(kMaxNumThreads, ExecutionHint::kLatency)).concurrency, cap);
  for (int n : {0, 1, 4}) {
    ArenaChoice throughput = ArenaFor(Options(n, ExecutionHint::kThroughput));
    EXPECT_EQ(throughput.concurrency, 1);
    EXPECT_FALSE(throughput.shared);
  }
}

struct Compiled {
  std::vector<float> weight;
  std::unique_ptr<CompiledGraph> graph;
};

// x [m, k] @ constant [k, n].
Compiled CompileMm(int64_t m, int64_t k, int64_t n, const CompileOptions& options) {
  Compiled c;
  c.weight.assign(k * n, 0.5f);
  GraphBuilder b;
  int x = b.Input({m, k});
  int w = b.Constant(c.weight, {k, n});
  b.Output(b.Call("aten.mm.default", {Ref(x), Ref(w)}));
  auto ir = GraphFromProto(b.graph());
  EXPECT_TRUE(ir.ok()) << ir.status();
  ir->options = options;
  const std::vector<float>& data = c.weight;
  auto resolve = [&data](const std::string&) -> absl::StatusOr<ConstantData> {
    return ConstantData{std::shared_ptr<const uint8_t>(
                            reinterpret_cast<const uint8_t*>(data.data()), [](const uint8_t*) {}),
                        static_cast<int64_t>(data.size() * sizeof(float))};
  };
  absl::StatusOr<std::unique_ptr<CompiledGraph>> compiled;
  RunLikeExecution(options, [&] { compiled = Compile(*std::move(ir), resolve); });
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  c.graph = *std::move(compiled);
  return c;
}

void RunTimes(const CompiledGraph& g, int times) {
  std::vector<float> in(g.input_metas[0].NumElements(), 1.f);
  std::vector<float> out(g.output_metas[0].NumElements());
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  for (int i = 0; i < times; ++i) ASSERT_TRUE(Execute(g, inputs, outputs).ok());
  EXPECT_FLOAT_EQ(out[0], 0.5f * g.input_metas[0].shape[1]);
}

TEST(Executor, SmallGraphUnderLatencyHintKeepsToOneThread) {
  if (ConfiguredThreads() < 2) GTEST_SKIP() << "one thread is all there is";
  Compiled c = CompileMm(2, 8, 4, CompileOptions());
  EXPECT_EQ(ChooseArena(*c.graph).concurrency, 1);  // deciding
  RunTimes(*c.graph, 5);
  ArenaChoice where = ChooseArena(*c.graph);
  EXPECT_EQ(where.concurrency, 1);
  EXPECT_FALSE(where.shared);
}

TEST(Executor, LargeGraphUnderLatencyHintUsesTheSharedArena) {
  if (ConfiguredThreads() < 2) GTEST_SKIP() << "one thread is all there is";
  // ~2 GFLOP: well over the small-graph threshold on one thread.
  Compiled c = CompileMm(1024, 1024, 1024, CompileOptions());
  RunTimes(*c.graph, 3);
  ArenaChoice where = ChooseArena(*c.graph);
  EXPECT_EQ(where.concurrency, ConfiguredThreads());
  EXPECT_TRUE(where.shared);
}

TEST(Executor, OnlyGraphsSeenToRunQuicklyRunShort) {
  Compiled small = CompileMm(2, 8, 4, Options(0, ExecutionHint::kThroughput));
  EXPECT_FALSE(RunsShort(*small.graph));  // not run yet
  RunTimes(*small.graph, 2);
  EXPECT_TRUE(RunsShort(*small.graph));
  Compiled large = CompileMm(1024, 1024, 1024, Options(0, ExecutionHint::kThroughput));
  RunTimes(*large.graph, 1);
  EXPECT_FALSE(RunsShort(*large.graph));
}

TEST(Executor, ThroughputHintRunsEveryGraphOnOneThreadOfItsOwn) {
  Compiled c = CompileMm(1024, 1024, 1024, Options(0, ExecutionHint::kThroughput));
  RunTimes(*c.graph, 2);
  ArenaChoice where = ChooseArena(*c.graph);
  EXPECT_EQ(where.concurrency, 1);
  EXPECT_FALSE(where.shared);
}


// ---- Branches --------------------------------------------------------------

// x [64, 256] @ eight constant [256, 256] matrices, concatenated: eight
// independent steps of ~8 MFLOP each (small next to the graph, which is
// well past the one-thread threshold), then a cat.
struct Branchy {
  std::map<std::string, std::vector<float>> constants;
  std::unique_ptr<CompiledGraph> graph;
};

Branchy CompileBranches(BranchMode branches) {
  Branchy c;
  GraphBuilder b;
  int x = b.Input({64, 256});
  kiln::v1::Argument parts;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int i = 0; i < 8; ++i) {
    std::vector<float> w(256 * 256);
    for (float& v : w) v = dist(gen);
    int wn = b.Constant(w, {256, 256});
    c.constants[Sha256Hex(w.data(), w.size() * sizeof(float))] = std::move(w);
    *parts.mutable_list()->add_items() = Ref(b.Call("aten.mm.default", {Ref(x), Ref(wn)}));
  }
  b.Output(b.Call("aten.cat.default", {parts, kiln::testing::Int(1)}));
  auto ir = GraphFromProto(b.graph());
  EXPECT_TRUE(ir.ok()) << ir.status();
  ir->options.branches = branches;
  auto resolve = [&c](const std::string& hash) -> absl::StatusOr<ConstantData> {
    const std::vector<float>& data = c.constants.at(hash);
    return ConstantData{std::shared_ptr<const uint8_t>(
                            reinterpret_cast<const uint8_t*>(data.data()), [](const uint8_t*) {}),
                        static_cast<int64_t>(data.size() * sizeof(float))};
  };
  absl::StatusOr<std::unique_ptr<CompiledGraph>> compiled;
  RunLikeExecution(ir->options, [&] { compiled = Compile(*std::move(ir), resolve); });
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  c.graph = *std::move(compiled);
  return c;
}

std::vector<float> RunBranches(const CompiledGraph& g, int seed) {
  std::vector<float> in(64 * 256), out(64 * 8 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>((i * 7 + seed) % 17) / 8 - 1;
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  EXPECT_TRUE(Execute(g, inputs, outputs).ok());
  return out;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::fabs(got[i] - want[i]) > 1e-4f;
  EXPECT_EQ(bad, 0);
}

int ConcurrentWaves(const CompiledGraph& g) {
  int n = 0;
  for (const Wave& w : g.waves) n += RunsConcurrently(g, w);
  return n;
}

TEST(Executor, BranchesOffNeverRunConcurrently) {
  Branchy off = CompileBranches(BranchMode::kOff);
  EXPECT_EQ(off.graph->waves.size(), off.graph->steps.size());
  EXPECT_EQ(ConcurrentWaves(*off.graph), 0);
}

TEST(Executor, ConcurrentWavesGiveTheResultsOfGraphOrder) {
  if (ConfiguredThreads() < 2) GTEST_SKIP() << "one thread is all there is";
  Branchy off = CompileBranches(BranchMode::kOff);
  const std::vector<float> want = RunBranches(*off.graph, 1);
  // Whether auto runs a wave concurrently depends on the step times this
  // machine measures (see AutoRunsOnlySmallBalancedWavesConcurrently); on
  // always does once the graph uses the shared arena.
  for (BranchMode mode : {BranchMode::kOn, BranchMode::kAuto}) {
    Branchy on = CompileBranches(mode);
    EXPECT_EQ(on.graph->waves.size(), 3u);  // 4 + 4 products, then the cat
    for (int i = 0; i < 5; ++i) ExpectClose(RunBranches(*on.graph, 1), want);  // calibration
    ASSERT_EQ(ChooseArena(*on.graph).concurrency, ConfiguredThreads());
    if (mode == BranchMode::kOn) {
      EXPECT_EQ(ConcurrentWaves(*on.graph), 2);
    }
    for (int i = 0; i < 5; ++i) ExpectClose(RunBranches(*on.graph, 1), want);
  }
}

TEST(Executor, AutoRunsOnlySmallBalancedWavesConcurrently) {
  Branchy c = CompileBranches(BranchMode::kAuto);
  const Wave& wave = c.graph->waves[0];
  ASSERT_EQ(wave.size(), 4);
  auto with_times = [&](std::vector<int64_t> us) {
    for (int i = 0; i < 4; ++i) c.graph->threading.step_ns[wave.begin + i] = us[i] * 1000;
    return RunsConcurrently(*c.graph, wave);
  };
  EXPECT_FALSE(RunsConcurrently(*c.graph, wave)) << "not measured yet";
  EXPECT_TRUE(with_times({80, 90, 70, 85}));
  EXPECT_FALSE(with_times({80, 90, 70, 2000})) << "one step keeps both threads busy";
  EXPECT_FALSE(with_times({300, 20, 20, 20})) << "one thread would idle";
  EXPECT_FALSE(with_times({2, 3, 1, 2})) << "too little to overlap";
  Branchy on = CompileBranches(BranchMode::kOn);
  EXPECT_TRUE(RunsConcurrently(*on.graph, on.graph->waves[0])) << "on: measured or not";
}

TEST(Executor, ConcurrentExecutesOfConcurrentWavesStayIndependent) {
  if (ConfiguredThreads() < 2) GTEST_SKIP() << "one thread is all there is";
  Branchy off = CompileBranches(BranchMode::kOff);
  Branchy on = CompileBranches(BranchMode::kOn);
  std::vector<std::vector<float>> want;
  for (int t = 0; t < 3; ++t) want.push_back(RunBranches(*off.graph, t));
  for (int i = 0; i < 5; ++i) RunBranches(*on.graph, 0);  // past calibration
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) ExpectClose(RunBranches(*on.graph, t), want[t]);
    });
  }
  for (auto& th : threads) th.join();
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

// Pooled arenas as concurrent runs leave them: `ages` of their returns.
void FillPool(const CompiledGraph& g, std::initializer_list<std::chrono::seconds> ages) {
  const auto now = std::chrono::steady_clock::now();
  absl::MutexLock lock(&g.pool_mu);
  for (auto age : ages) {
    g.pool.push_back(std::make_unique<RunArena>(g.TotalArenaBytes()));
    g.pool.back()->returned = now - age;
  }
}

TEST(Executor, IdleArenasBeyondOneAreTrimmed) {
  CompiledGraph g;
  g.arena_bytes = 1 << 20;
  // Oldest at the front, as a stack of returns leaves them.
  FillPool(g, {std::chrono::seconds(120), std::chrono::seconds(90), std::chrono::seconds(1)});
  EXPECT_EQ(TrimIdleArenas(g, std::chrono::seconds(60)), 2 * g.TotalArenaBytes());
  ASSERT_EQ(g.pool.size(), 1u);
  EXPECT_GT(g.pool[0]->returned, std::chrono::steady_clock::now() - std::chrono::seconds(60));
  // Recent ones stay; one always stays, however old.
  EXPECT_EQ(TrimIdleArenas(g, std::chrono::seconds(60)), 0);
  EXPECT_EQ(TrimIdleArenas(g, std::chrono::seconds(0)), 0);
  EXPECT_EQ(g.pool.size(), 1u);
}

TEST(Executor, ArenasInUseLatelyAreKept) {
  CompiledGraph g;
  g.arena_bytes = 4096;
  FillPool(g, {std::chrono::seconds(5), std::chrono::seconds(2)});
  EXPECT_EQ(TrimIdleArenas(g, std::chrono::seconds(60)), 0);
  EXPECT_EQ(g.pool.size(), 2u);
  EXPECT_EQ(TrimIdleArenas(g, std::chrono::seconds(3)), g.TotalArenaBytes());
  EXPECT_EQ(g.pool.size(), 1u);
}

}  // namespace
}  // namespace kiln::runtime
