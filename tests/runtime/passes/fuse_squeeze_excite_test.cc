// FuseSqueezeExcite through Compile(): a squeeze-and-excitation block
// between two convolutions becomes one kiln.squeeze_excite step in every
// layout, with the result of the same graph compiled with
// KILN_SQUEEZE_EXCITE=0; a block whose gate is also a graph output keeps
// its steps.
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "tests/testing/compiled_graph_runs.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::CompileInLayout;
using kiln::testing::ConstantTable;
using kiln::testing::ExpectOutputsNear;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::RunOnce;
using kiln::testing::StepsOf;
using kiln::testing::UniformFloats;

struct Built {
  ConstantTable consts;
  kiln::v1::Graph graph;
};

// x -> conv 3x3 + relu -> mean -> conv 1x1 + relu -> conv 1x1 + sigmoid
//   -> gate * activation -> conv 1x1 -> output (and the gate, with
// `gate_is_output`).
Built SqueezeExciteBlock(bool gate_is_output) {
  Built f;
  GraphBuilder b;
  int seed = 1;
  auto constant = [&](std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v = UniformFloats(n, -1, 1, seed++);
    f.consts.Add(v);
    return b.Constant(v, shape);
  };
  auto conv = [&](int in, int64_t cin, int64_t cout, int64_t k) {
    return b.Call("aten.convolution.default",
                  {Ref(in), Ref(constant({cout, cin, k, k})), Ref(constant({cout})),
                   IntList({1, 1}), IntList({k / 2, k / 2}), IntList({1, 1}), Bool(false),
                   IntList({0, 0}), Int(1)});
  };
  int x = b.Input({1, 16, 6, 6});
  int act = b.Call("aten.relu.default", {Ref(conv(x, 16, 16, 3))});
  int mean = b.Call("aten.mean.dim", {Ref(act), IntList({-1, -2}), Bool(true)});
  int hidden = b.Call("aten.relu.default", {Ref(conv(mean, 16, 4, 1))});
  int gate = b.Call("aten.sigmoid.default", {Ref(conv(hidden, 4, 16, 1))});
  int scaled = b.Call("aten.mul.Tensor", {Ref(gate), Ref(act)});
  b.Output(conv(scaled, 16, 8, 1));
  if (gate_is_output) b.Output(gate);
  f.graph = b.graph();
  return f;
}

TEST(FuseSqueezeExcite, BlockBecomesOneStepInEveryLayout) {
  const std::vector<float> x = UniformFloats(16 * 36, -1, 1, 99);
  for (LayoutOption layout : {LayoutOption::kNchw, LayoutOption::kNhwc, LayoutOption::kBlocked}) {
    SCOPED_TRACE(static_cast<int>(layout));
    Built f = SqueezeExciteBlock(false);
    auto fused = CompileInLayout(f.graph, f.consts, layout);
    ASSERT_EQ(setenv("KILN_SQUEEZE_EXCITE", "0", 1), 0);
    auto unfused = CompileInLayout(f.graph, f.consts, layout);
    ASSERT_EQ(unsetenv("KILN_SQUEEZE_EXCITE"), 0);
    ASSERT_TRUE(fused && unfused);
    const std::string dump = DumpCompiledGraph(*fused);
    EXPECT_EQ(StepsOf(*fused, "kiln.squeeze_excite"), 1) << dump;
    EXPECT_EQ(StepsOf(*fused, "aten.mean.dim"), 0) << dump;
    EXPECT_EQ(StepsOf(*fused, "aten.mul.Tensor"), 0) << dump;
    EXPECT_EQ(StepsOf(*unfused, "kiln.squeeze_excite"), 0);
    EXPECT_EQ(StepsOf(*unfused, "aten.mean.dim"), 1) << DumpCompiledGraph(*unfused);
    EXPECT_EQ(unfused->steps.size(), fused->steps.size() + 3);
    // Sums in another order than oneDNN's: float rounding apart.
    ExpectOutputsNear(RunOnce(*fused, x), RunOnce(*unfused, x), 1e-5f);
  }
}

TEST(FuseSqueezeExcite, GateReadElsewhereKeepsTheBlock) {
  Built f = SqueezeExciteBlock(true);
  auto cg = CompileInLayout(f.graph, f.consts, LayoutOption::kBlocked);
  ASSERT_TRUE(cg);
  EXPECT_EQ(StepsOf(*cg, "kiln.squeeze_excite"), 0) << DumpCompiledGraph(*cg);
  EXPECT_EQ(StepsOf(*cg, "aten.mean.dim"), 1);
}

}  // namespace
}  // namespace kiln::runtime
