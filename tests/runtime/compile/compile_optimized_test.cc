// CompileOptimized from the graph Compile's passes left (CompileHints::
// on_optimized, through the artifact's encoding): no pass runs, the kernels
// and the answer are those of the compile it describes; a derived constant
// found nowhere is NOT_FOUND, not a guess.
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ir/optimized_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/conv_bn_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::UniformFloats;

constexpr int64_t kIc = 4, kOc = 8, kHw = 6;

// The fold of the batch norm gives derived constants with share keys; the
// tail reads a client constant at run time.
struct ConvBnGraph {
  std::vector<std::vector<float>> weights;
  kiln::testing::ConstantTable constants;
  kiln::v1::Graph graph;

  ConvBnGraph() {
    kiln::testing::ConvBnGraph g = kiln::testing::BuildConvBnGraph(
        1, kIc, kOc, kHw, kiln::testing::ConvBnTail::kTimesTwoAddRow);
    weights = std::move(g.weights);
    for (const auto& w : weights) constants.Add(w);
    graph = std::move(g.graph);
  }
};

std::vector<float> RunOnFixedInput(const CompiledGraph& cg) {
  std::vector<float> x = UniformFloats(kIc * kHw * kHw, -1.f, 1.f, 42);
  std::vector<float> y(kOc * kHw * kHw, 0.f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  EXPECT_TRUE(Execute(cg, in, out).ok());
  return y;
}

TEST(CompileOptimized, RunsNoPassAndAnswersAsTheCompileItDescribes) {
  ConvBnGraph g;
  kiln::v1::OptimizedGraph proto;
  bool described = false;
  CompileHints hints;
  // The derived constants stay with the compiled graph (as for a shape
  // variant), so that the second compile finds them live.
  hints.keep_derived_constants = true;
  hints.on_optimized = [&](const Graph& graph, const std::vector<const void*>& data) {
    described = OptimizedGraphToProto(graph, data, int64_t{1} << 20, &proto);
  };
  auto cold = Compile(*GraphFromProto(g.graph), g.constants.Resolver(), {}, hints);
  ASSERT_TRUE(cold.ok()) << cold.status();
  ASSERT_TRUE(described);

  auto decoded = OptimizedGraphFromProto(proto);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto warm = CompileOptimized(std::move(decoded->graph), std::move(decoded->inline_constants),
                               g.constants.Resolver());
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ((*warm)->phases.passes_ms, 0.0);
  ASSERT_EQ((*warm)->steps.size(), (*cold)->steps.size());
  for (size_t i = 0; i < (*warm)->steps.size(); ++i) {
    EXPECT_EQ((*warm)->graph.nodes[(*warm)->steps[i].node].target,
              (*cold)->graph.nodes[(*cold)->steps[i].node].target);
  }
  EXPECT_EQ((*warm)->arena_bytes, (*cold)->arena_bytes);
  EXPECT_EQ(RunOnFixedInput(**warm), RunOnFixedInput(**cold));
}

TEST(CompileOptimized, ADerivedConstantFoundNowhereIsNotFound) {
  ConvBnGraph g;
  kiln::v1::OptimizedGraph proto;
  CompileHints hints;
  hints.on_optimized = [&](const Graph& graph, const std::vector<const void*>& data) {
    OptimizedGraphToProto(graph, data, int64_t{1} << 20, &proto);
  };
  int derived = 0;
  {
    auto cold = Compile(*GraphFromProto(g.graph), g.constants.Resolver(), {}, hints);
    ASSERT_TRUE(cold.ok()) << cold.status();
    for (const auto& node : proto.nodes()) {
      derived += node.has_constant() && node.constant().share_key().rfind("d:", 0) == 0;
    }
  }
  ASSERT_GE(derived, 1);
  // The compile is gone, with its derived constants, and nothing persists
  // them: the description names bytes nobody holds.
  auto decoded = OptimizedGraphFromProto(proto);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto warm = CompileOptimized(std::move(decoded->graph), std::move(decoded->inline_constants),
                               g.constants.Resolver());
  EXPECT_EQ(warm.status().code(), absl::StatusCode::kNotFound) << warm.status();
}

TEST(CompileOptimized, MissingClientConstantsAreReportedAsByCompile) {
  ConvBnGraph g;
  kiln::v1::OptimizedGraph proto;
  CompileHints hints;
  hints.on_optimized = [&](const Graph& graph, const std::vector<const void*>& data) {
    OptimizedGraphToProto(graph, data, int64_t{1} << 20, &proto);
  };
  auto cold = Compile(*GraphFromProto(g.graph), g.constants.Resolver(), {}, hints);
  ASSERT_TRUE(cold.ok()) << cold.status();
  int client = 0;
  for (const auto& node : proto.nodes()) {
    client += node.has_constant() && node.constant().share_key().rfind("h:", 0) == 0;
  }
  ASSERT_GE(client, 1);  // the row the tail adds
  auto decoded = OptimizedGraphFromProto(proto);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  auto warm = CompileOptimized(std::move(decoded->graph), std::move(decoded->inline_constants),
                               kiln::testing::ConstantTable().Resolver());
  EXPECT_EQ(warm.status().code(), absl::StatusCode::kFailedPrecondition) << warm.status();
}

}  // namespace
}  // namespace kiln::runtime
