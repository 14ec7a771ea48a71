// The layout pass's cost model (passes/layout_cost.h), on its own: one
// convolution's estimate per layout, and the choice it makes for a graph
// from those and the reorders each layout would leave.
#include "runtime/passes/layout_cost.h"

#include <vector>

#include "gtest/gtest.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/onednn_util.h"

namespace kiln::runtime::channels_last {
namespace {

Node Value(std::vector<int64_t> shape) {
  Node n;
  n.kind = Node::Kind::kInput;
  n.outputs = {TensorMeta{DType::kF32, std::move(shape)}};
  return n;
}

// x [n, cin, hw, hw] -> kiln.conv2d with a [cout, cin / groups, k, k]
// weight, stride 1, "same" padding: one graph per convolution.
Graph Conv(int64_t n, int64_t cin, int64_t cout, int64_t k, int64_t hw, int64_t groups) {
  Graph g;
  g.nodes.push_back(Value({n, cin, hw, hw}));
  g.nodes.push_back(Value({cout, cin / groups, k, k}));
  Node conv;
  conv.target = "kiln.conv2d";
  conv.args = {TensorArg({0, 0}), TensorArg({1, 0}), NoneArg(), IntListArg({1, 1}),
               IntListArg({k / 2, k / 2}), IntListArg({1, 1}), IntArg(groups)};
  conv.outputs = {TensorMeta{DType::kF32, {n, cout, hw, hw}}};
  g.nodes.push_back(conv);
  g.outputs = {{2, 0}};
  return g;
}

LayoutCost Estimate(const Graph& g) { return EstimateConv(g, g.nodes[2]); }

TEST(LayoutCost, PointwiseConvolutionsAreCheaperBlocked) {
  const LayoutCost c = Estimate(Conv(1, 64, 64, 1, 28, 1));
  EXPECT_GT(c.nhwc, 0);
  EXPECT_LT(c.blocked, c.nhwc);
}

TEST(LayoutCost, WideDenseConvolutionsAreCheaperInNhwc) {
  const LayoutCost c = Estimate(Conv(1, 256, 256, 3, 14, 1));
  EXPECT_GT(c.blocked, c.nhwc);
}

TEST(LayoutCost, GroupsNarrowerThanABlockMakeBlockedProhibitive) {
  const LayoutCost c = Estimate(Conv(1, 128, 128, 3, 14, 32));  // 4 channels a group
  EXPECT_GT(c.blocked, 10 * c.nhwc);
}

TEST(LayoutCost, EstimatesGrowWithTheWork) {
  EXPECT_NEAR(Estimate(Conv(2, 64, 64, 1, 28, 1)).nhwc, 2 * Estimate(Conv(1, 64, 64, 1, 28, 1)).nhwc,
              1e-12);
}

TEST(LayoutCost, ANodeItCannotReadCostsNothing) {
  Graph g = Conv(1, 64, 64, 1, 28, 1);
  g.nodes[2].args.resize(3);  // no groups
  const LayoutCost c = Estimate(g);
  EXPECT_EQ(c.nhwc, 0);
  EXPECT_EQ(c.blocked, 0);
}

TEST(LayoutCost, TheLayoutOptionDecidesWhenItNamesOne) {
  Graph g = Conv(1, 64, 64, 1, 28, 1);
  auto never = [](Layout) -> double {
    ADD_FAILURE() << "reorders estimated for a layout the options fixed";
    return 0;
  };
  g.options.layout = LayoutOption::kNhwc;
  EXPECT_EQ(ChooseLayout(g, never), Layout::kNhwc);
  g.options.layout = LayoutOption::kBlocked;
  EXPECT_EQ(ChooseLayout(g, never), Layout::kBlocked);
}

TEST(LayoutCost, AutoWeighsConvolutionsAgainstReorders) {
  Graph g = Conv(1, 64, 64, 1, 28, 1);
  g.options.layout = LayoutOption::kAuto;
  if (HasAvx512Kernels()) {
    // oneDNN's AVX-512 kernels compute in NHWC: no estimate is needed.
    EXPECT_EQ(ChooseLayout(g, [](Layout) { return 0.0; }), Layout::kNhwc);
    return;
  }
  // Pointwise convolutions and no reorders either way: blocked.
  EXPECT_EQ(ChooseLayout(g, [](Layout) { return 0.0; }), Layout::kBlocked);
  // Blocked would leave a gigabyte of reorders: NHWC.
  EXPECT_EQ(ChooseLayout(g, [](Layout l) { return l == Layout::kBlocked ? 1e9 : 0.0; }),
            Layout::kNhwc);
}

}  // namespace
}  // namespace kiln::runtime::channels_last
