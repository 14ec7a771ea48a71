// FuseChannelShuffle through Compile(): shufflenet's block tail, cat of
// two halves -> channel shuffle in two groups -> split, becomes one
// kiln.interleave_channels step in channels-last graphs, with the result
// of the NCHW graph that runs the cat, permute and split.
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
using kiln::testing::ExpectOutputsNear;
using kiln::testing::RunOnce;
using kiln::testing::StepsOf;
using kiln::testing::ConstantTable;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::RefList;
using kiln::testing::UniformFloats;

struct Built {
  ConstantTable consts;
  kiln::v1::Graph graph;
};

// x -> two 1x1 convolutions of 6 channels -> cat -> shuffle (2 groups);
// with `split`, the halves each feed a 1x1 convolution (two outputs),
// otherwise one convolution reads the whole shuffle.
Built ShuffleBlock(bool split) {
  Built f;
  GraphBuilder b;
  int seed = 1;
  auto conv = [&](const kiln::v1::Argument& in, int64_t cin, int64_t cout) {
    std::vector<float> w = UniformFloats(cout * cin, -1, 1, seed++);
    std::vector<float> bias = UniformFloats(cout, -1, 1, seed++);
    f.consts.Add(w);
    f.consts.Add(bias);
    return b.Call("aten.convolution.default",
                  {in, Ref(b.Constant(w, {cout, cin, 1, 1})), Ref(b.Constant(bias, {cout})),
                   IntList({1, 1}), IntList({0, 0}), IntList({1, 1}), Bool(false),
                   IntList({0, 0}), Int(1)});
  };
  int x = b.Input({1, 8, 5, 5});
  int cat = b.Call("aten.cat.default", {RefList({conv(Ref(x), 8, 6), conv(Ref(x), 8, 6)}), Int(1)});
  int groups = b.Call("aten.view.default", {Ref(cat), IntList({1, 2, 6, 5, 5})});
  int swapped = b.Call("aten.permute.default", {Ref(groups), IntList({0, 2, 1, 3, 4})});
  int shuffled = b.Call("aten.view.default", {Ref(swapped), IntList({1, 12, 5, 5})});
  if (split) {
    int halves = b.Call("aten.split_with_sizes.default", {Ref(shuffled), IntList({6, 6}), Int(1)});
    b.Output(conv(Ref(b.Call("aten.relu.default", {Ref(halves, 0)})), 6, 4));
    b.Output(conv(Ref(halves, 1), 6, 4));
  } else {
    b.Output(conv(Ref(shuffled), 12, 4));
  }
  f.graph = b.graph();
  return f;
}

TEST(FuseChannelShuffle, CatShuffleAndSplitBecomeOneInterleave) {
  for (bool split : {true, false}) {
    Built f = ShuffleBlock(split);
    auto nhwc = CompileInLayout(f.graph, f.consts, LayoutOption::kNhwc);
    auto nchw = CompileInLayout(f.graph, f.consts, LayoutOption::kNchw);
    ASSERT_TRUE(nhwc && nchw);
    const std::string dump = DumpCompiledGraph(*nhwc);
    EXPECT_EQ(StepsOf(*nhwc, "kiln.interleave_channels"), 1) << dump;
    for (const char* gone : {"aten.cat.default", "aten.permute.default",
                             "aten.split_with_sizes.default"}) {
      EXPECT_EQ(StepsOf(*nhwc, gone), 0) << gone << "\n" << dump;
    }
    EXPECT_EQ(StepsOf(*nchw, "kiln.interleave_channels"), 0);
    // Different convolution kernels per layout: float rounding apart.
    const std::vector<float> x = UniformFloats(8 * 25, -1, 1, 99);
    ExpectOutputsNear(RunOnce(*nhwc, x), RunOnce(*nchw, x), 1e-5f);
  }
}

}  // namespace
}  // namespace kiln::runtime
