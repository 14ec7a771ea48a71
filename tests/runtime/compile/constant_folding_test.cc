// Compile-time folding of values computed from constants alone: chains that
// start from ops reading no tensor (aranges, fills), what becomes a
// constant and what is dropped, checked by running the compiled graphs.
#include "runtime/compile/constant_folding.h"

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;

constexpr int64_t kN = 64;

std::unique_ptr<CompiledGraph> CompileOrDie(GraphBuilder& b) {
  kiln::testing::ConstantTable none;
  auto ir = GraphFromProto(b.graph());
  EXPECT_TRUE(ir.ok()) << ir.status();
  auto cg = Compile(*std::move(ir), none.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

std::vector<std::string> StepTargets(const CompiledGraph& cg) {
  std::vector<std::string> targets;
  for (const CompiledStep& step : cg.steps) targets.push_back(cg.graph.nodes[step.node].target);
  return targets;
}

int64_t OwnedBytes(const CompiledGraph& cg) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const ConstantData& c : cg.owned_constants) {
    if (seen.insert(c.bytes.get()).second) bytes += c.size;
  }
  return bytes;
}

// x + |j - i| / 2 over a kN x kN grid, the grid built from aranges: the
// shape of a relative position bias.
GraphBuilder DistanceGraph() {
  GraphBuilder b;
  const int x = b.Input({kN, kN});
  const int a = b.Call("aten.arange.start_step", {Float(0), Float(kN), Float(1)});
  const int rows = b.Call("aten.unsqueeze.default", {Ref(a), Int(1)});
  const int cols = b.Call("aten.unsqueeze.default", {Ref(a), Int(0)});
  const int diff = b.Call("aten.sub.Tensor", {Ref(cols), Ref(rows)});
  const int dist = b.Call("aten.abs.default", {Ref(diff)});
  const int half = b.Call("aten.mul.Tensor", {Ref(dist), Float(0.5)});
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(half)}));
  return b;
}

TEST(ConstantFolding, AChainFromAnArangeRunsOnceAtCompileTime) {
  GraphBuilder b = DistanceGraph();
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(StepTargets(*cg), std::vector<std::string>{"aten.add.Tensor"});
  // The run reads one folded value; the arange and the rest of the chain
  // were dropped once it was computed.
  EXPECT_EQ(OwnedBytes(*cg), kN * kN * 4);
  const std::vector<float> x = kiln::testing::UniformFloats(kN * kN, -1, 1, 3);
  std::vector<float> y(kN * kN, 99.f);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      EXPECT_FLOAT_EQ(y[i * kN + j], x[i * kN + j] + std::abs(j - i) * 0.5f) << i << "," << j;
    }
  }
}

TEST(ConstantFolding, AnotherGraphFoldingTheSameFindsItByKey) {
  GraphBuilder b1 = DistanceGraph(), b2 = DistanceGraph();
  auto first = CompileOrDie(b1);
  auto second = CompileOrDie(b2);
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_EQ(first->owned_constants.size(), 1u);
  ASSERT_EQ(second->owned_constants.size(), 1u);
  EXPECT_EQ(first->owned_constants[0].bytes.get(), second->owned_constants[0].bytes.get());
}

TEST(ConstantFolding, ALargeFillARunReadsDirectlyStaysAnOp) {
  // Reading a folded fill would cost a run as much as filling it.
  constexpr int64_t kBig = 256;  // 256 KiB of floats
  static_assert(kBig * kBig * 4 > kMaxFoldedSourceBytes);
  GraphBuilder b;
  const int x = b.Input({kBig, kBig});
  const int fill = b.Call("aten.full.default", {IntList({kBig, kBig}), Float(2)});
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(fill)}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->steps.size(), 2u);
  EXPECT_EQ(OwnedBytes(*cg), 0);
  const std::vector<float> in_x(kBig * kBig, 1.f);
  std::vector<float> y(kBig * kBig, 0.f);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  EXPECT_EQ(y.front(), 3.f);
  EXPECT_EQ(y.back(), 3.f);
}

// 4 MiB: the folded value is a mapping of its own (util/large_alloc.h),
// which the compiled graph must free as one.
TEST(ConstantFolding, ALargeFillFeedingComputationFoldsWithIt) {
  constexpr int64_t kBig = 1024;
  GraphBuilder b;
  const int x = b.Input({kBig, kBig});
  const int fill = b.Call("aten.full.default", {IntList({kBig, kBig}), Float(2)});
  const int scaled = b.Call("aten.exp.default", {Ref(fill)});
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(scaled)}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(StepTargets(*cg), std::vector<std::string>{"aten.add.Tensor"});
  EXPECT_EQ(OwnedBytes(*cg), kBig * kBig * 4);
  const std::vector<float> in_x(kBig * kBig, 1.f);
  std::vector<float> y(kBig * kBig, 0.f);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  EXPECT_FLOAT_EQ(y[12345], 1.f + std::exp(2.f));
  EXPECT_FLOAT_EQ(y[kBig * kBig - 1], 1.f + std::exp(2.f));
}

TEST(ConstantFolding, AliasesOfAFoldedValueShareItsBytes) {
  // Two reshapes of one folded value, each read by the run: one copy.
  GraphBuilder b;
  const int x = b.Input({kN, kN});
  const int column = b.Input({kN * kN, 1});
  const int a = b.Call("aten.arange.start_step", {Float(0), Float(kN * kN), Float(1)});
  const int doubled = b.Call("aten.mul.Tensor", {Ref(a), Float(2)});
  const int grid = b.Call("aten.view.default", {Ref(doubled), IntList({kN, kN})});
  const int tall = b.Call("aten.view.default", {Ref(doubled), IntList({kN * kN, 1})});
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(grid)}));
  b.Output(b.Call("aten.add.Tensor", {Ref(column), Ref(tall)}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->steps.size(), 2u);
  EXPECT_EQ(cg->owned_constants.size(), 2u);
  EXPECT_EQ(OwnedBytes(*cg), kN * kN * 4);
  const std::vector<float> zeros(kN * kN, 0.f);
  std::vector<float> y1(kN * kN), y2(kN * kN);
  const void* in[] = {zeros.data(), zeros.data()};
  void* out[] = {y1.data(), y2.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  for (int64_t i = 0; i < kN * kN; ++i) {
    ASSERT_EQ(y1[i], 2.f * i) << i;
    ASSERT_EQ(y2[i], 2.f * i) << i;
  }
}

}  // namespace
}  // namespace kiln::runtime
