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
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

constexpr int64_t kIc = 4, kOc = 8, kHw = 6;

// conv -> batch norm -> relu -> * 2 + row: a fold of the batch norm into
// the convolution (derived constants with share keys), a fused activation,
// and an elementwise tail that reads a client constant at run time.
struct ConvBnGraph {
  std::vector<std::vector<float>> weights;
  kiln::testing::ConstantTable constants;
  kiln::v1::Graph graph;

  ConvBnGraph() {
    GraphBuilder b;
    const int x = b.Input({1, kIc, kHw, kHw}, "x");
    auto constant = [&](std::vector<int64_t> shape, float lo, float hi) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      weights.push_back(UniformFloats(n, lo, hi, static_cast<int>(weights.size()) + 3));
      constants.Add(weights.back());
      return b.Constant(weights.back(), shape);
    };
    const int conv = b.Call("aten.convolution.default",
                            {Ref(x), Ref(constant({kOc, kIc, 3, 3}, -0.3f, 0.3f)),
                             Ref(constant({kOc}, -0.1f, 0.1f)), IntList({1, 1}),
                             IntList({1, 1}), IntList({1, 1}), Bool(false), IntList({0, 0}),
                             Int(1)},
                            "conv");
    const int bn = b.Call("aten.native_batch_norm.default",
                          {Ref(conv), Ref(constant({kOc}, 0.5f, 1.5f)),
                           Ref(constant({kOc}, -0.5f, 0.5f)), Ref(constant({kOc}, -0.2f, 0.2f)),
                           Ref(constant({kOc}, 0.5f, 2.f)), Bool(false), Float(0.1),
                           Float(1e-5)},
                          "bn");
    const int relu = b.Call("aten.relu.default", {Ref(bn, 0)}, "relu");
    const int mul = b.Call("aten.mul.Tensor", {Ref(relu), Float(2.0)}, "mul");
    b.Output(b.Call("aten.add.Tensor", {Ref(mul), Ref(constant({kHw}, -1.f, 1.f))}, "add"));
    graph = b.graph();
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
