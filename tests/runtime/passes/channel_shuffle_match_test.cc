// The channel-shuffle matcher (passes/channel_shuffle_match.h), on its
// own: shufflenet's view -> permute -> (clone) -> view chain is found by
// its last node, and chains whose steps are read elsewhere are not.
#include "runtime/passes/channel_shuffle_match.h"

#include <vector>

#include "gtest/gtest.h"
#include "runtime/ir/arg_builders.h"

namespace kiln::runtime::channels_last {
namespace {

TensorMeta F32(std::vector<int64_t> shape) { return TensorMeta{DType::kF32, std::move(shape)}; }

int Add(Graph& g, const std::string& target, std::vector<Arg> args, std::vector<int64_t> shape) {
  Node n;
  n.target = target;
  n.name = target;
  n.args = std::move(args);
  n.outputs = {F32(std::move(shape))};
  g.nodes.push_back(std::move(n));
  return static_cast<int>(g.nodes.size()) - 1;
}

// x [1, 12, 5, 5] -> view [1, groups, 12 / groups, 5, 5] -> permute ->
// (clone) -> view [1, 12, 5, 5], the graph's output.
Graph Shuffle(int64_t groups, bool clone) {
  Graph g;
  Node x;
  x.kind = Node::Kind::kInput;
  x.outputs = {F32({1, 12, 5, 5})};
  g.nodes.push_back(x);
  g.num_inputs = 1;
  int v = Add(g, "aten.view.default", {TensorArg({0, 0}), IntListArg({1, groups, 12 / groups, 5, 5})},
              {1, groups, 12 / groups, 5, 5});
  int p = Add(g, "aten.permute.default", {TensorArg({v, 0}), IntListArg({0, 2, 1, 3, 4})},
              {1, 12 / groups, groups, 5, 5});
  if (clone) p = Add(g, "aten.clone.default", {TensorArg({p, 0})}, {1, 12 / groups, groups, 5, 5});
  int last = Add(g, "aten.view.default", {TensorArg({p, 0}), IntListArg({1, 12, 5, 5})},
                 {1, 12, 5, 5});
  g.outputs = {{last, 0}};
  return g;
}

TEST(ChannelShuffleMatch, FindsTheChainByItsLastNode) {
  for (bool clone : {false, true}) {
    const Graph g = Shuffle(3, clone);
    const auto chains = FindShuffles(g, ComputeUses(g));
    ASSERT_EQ(chains.size(), 1u) << clone;
    const int last = static_cast<int>(g.nodes.size()) - 1;
    ASSERT_TRUE(chains.contains(last));
    const ShuffleChain& chain = chains.at(last);
    EXPECT_EQ(chain.groups, 3);
    EXPECT_EQ(chain.x, (ValueRef{0, 0}));
    std::vector<int> steps;
    for (int i = 1; i <= last; ++i) steps.push_back(i);
    EXPECT_EQ(chain.steps, steps);
  }
}

TEST(ChannelShuffleMatch, AStepReadElsewhereBreaksTheChain) {
  Graph g = Shuffle(2, false);
  g.outputs.push_back({2, 0});  // the permute is an output too
  EXPECT_TRUE(FindShuffles(g, ComputeUses(g)).empty());
}

TEST(ChannelShuffleMatch, OnlyTheGroupSwapIsAShuffle) {
  Graph g = Shuffle(2, false);
  g.nodes[2].args[1] = IntListArg({0, 1, 2, 4, 3});
  EXPECT_TRUE(FindShuffles(g, ComputeUses(g)).empty());
}

TEST(ChannelShuffleMatch, ACloneToChannelsLastIsNotPartOfIt) {
  Graph g = Shuffle(2, true);
  g.nodes[3].args.push_back(MemoryFormatArg(2));
  EXPECT_TRUE(FindShuffles(g, ComputeUses(g)).empty());
}

TEST(ChannelShuffleMatch, TheLastViewMustRestoreTheInputShape) {
  Graph g = Shuffle(2, false);
  g.nodes[3].outputs[0].shape = {1, 12, 25, 1};
  g.nodes[3].args[1] = IntListArg({1, 12, 25, 1});
  EXPECT_TRUE(FindShuffles(g, ComputeUses(g)).empty());
}

}  // namespace
}  // namespace kiln::runtime::channels_last
