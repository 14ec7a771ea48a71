// The channel shuffle the layout pass keeps in channels-last order
// (passes/channels_last.cc): shufflenet's view -> permute -> view chain,
// matched on the graph as lowering writes it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/ir/graph.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime::channels_last {

// A channel shuffle (shufflenet): view(x, [N, g, C/g, H, W]) ->
// permute([0, 2, 1, 3, 4]) -> optional clone -> view([N, C, H, W]), each
// step read only by the next. In channels-last order the same permutation
// of channels is view(x, [N, H, W, g, C/g]) -> permute([0, 1, 2, 4, 3]) ->
// view([N, H, W, C]): the activations need not leave the layout for it.
struct ShuffleChain {
  ValueRef x;                  // the [N, C, H, W] input
  std::vector<int> steps;      // the chain's nodes, first to last
  int64_t groups = 0;
};

// The chain ending at node `last` (the final view), if it is one; every
// step but the last must be read only by the next. `uses` describes `g`.
std::optional<ShuffleChain> MatchShuffle(const Graph& g, const Uses& uses, int last);

// Every channel shuffle of the graph, by its last node.
absl::flat_hash_map<int, ShuffleChain> FindShuffles(const Graph& g, const Uses& uses);

}  // namespace kiln::runtime::channels_last
