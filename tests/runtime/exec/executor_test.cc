// Where executions run: the arena each compile option asks for, and the
// one-thread choice for small graphs under the latency hint.
#include "runtime/exec/executor.h"

#include <map>

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

}  // namespace
}  // namespace kiln::runtime
