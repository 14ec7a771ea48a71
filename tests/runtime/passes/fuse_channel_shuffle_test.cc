// FuseChannelShuffle through Compile(): shufflenet's block tail, cat of
// two halves -> channel shuffle in two groups -> split, becomes one
// kiln.interleave_channels step in channels-last graphs, with the result
// of the NCHW graph that runs the cat, permute and split.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
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

std::unique_ptr<CompiledGraph> CompileIn(Built& f, LayoutOption layout) {
  auto ir = GraphFromProto(f.graph);
  EXPECT_TRUE(ir.ok()) << ir.status();
  ir->options.layout = layout;
  auto cg = Compile(*std::move(ir), f.consts.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

std::vector<std::vector<float>> RunGraph(const CompiledGraph& cg) {
  const std::vector<float> x = UniformFloats(8 * 25, -1, 1, 99);
  std::vector<std::vector<float>> outs;
  std::vector<void*> ptrs;
  for (const TensorMeta& m : cg.output_metas) outs.emplace_back(m.NumElements());
  for (auto& o : outs) ptrs.push_back(o.data());
  const void* ins[] = {x.data()};
  EXPECT_TRUE(Execute(cg, ins, ptrs).ok());
  return outs;
}

int StepsOf(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const CompiledStep& s : cg.steps) n += cg.graph.nodes[s.node].target == target;
  return n;
}

TEST(FuseChannelShuffle, CatShuffleAndSplitBecomeOneInterleave) {
  for (bool split : {true, false}) {
    Built f = ShuffleBlock(split);
    auto nhwc = CompileIn(f, LayoutOption::kNhwc);
    auto nchw = CompileIn(f, LayoutOption::kNchw);
    ASSERT_TRUE(nhwc && nchw);
    const std::string dump = DumpCompiledGraph(*nhwc);
    EXPECT_EQ(StepsOf(*nhwc, "kiln.interleave_channels"), 1) << dump;
    for (const char* gone : {"aten.cat.default", "aten.permute.default",
                             "aten.split_with_sizes.default"}) {
      EXPECT_EQ(StepsOf(*nhwc, gone), 0) << gone << "\n" << dump;
    }
    EXPECT_EQ(StepsOf(*nchw, "kiln.interleave_channels"), 0);
    const auto fused = RunGraph(*nhwc), plain = RunGraph(*nchw);
    ASSERT_EQ(fused.size(), plain.size());
    for (size_t o = 0; o < fused.size(); ++o) {
      float scale = 0;
      for (float v : plain[o]) scale = std::max(scale, std::abs(v));
      ASSERT_EQ(fused[o].size(), plain[o].size());
      for (size_t i = 0; i < fused[o].size(); ++i) {
        // Different convolution kernels per layout: float rounding apart.
        EXPECT_NEAR(fused[o][i], plain[o][i], 1e-5f * scale) << o << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
