#include "runtime/passes/channel_shuffle_match.h"

#include <algorithm>
#include <array>

#include "runtime/ops/registry.h"

namespace kiln::runtime::channels_last {
namespace {

bool IsView(const Node& n) { return !n.dead && HasTrait(n, kReshape); }

// The node reading node i's only output, when it is the only reader.
int SoleUser(const Uses& uses, int i) {
  if (uses.users[i].size() != 1 || uses.users[i][0].size() != 1 || uses.is_output[i][0]) {
    return -1;
  }
  return uses.users[i][0][0];
}

}  // namespace

std::optional<ShuffleChain> MatchShuffle(const Graph& g, const Uses& uses, int last) {
  const Node& y = g.nodes[last];
  if (!IsView(y) || y.args.empty() || y.args[0].kind != Arg::Kind::kTensor ||
      y.outputs.size() != 1 || y.outputs[0].rank() != 4 || y.outputs[0].dtype != DType::kF32) {
    return std::nullopt;
  }
  std::vector<int> steps = {last};
  int at = y.args[0].tensor.node;
  auto sole_arg = [&](int node) -> const Node* {
    const Node& n = g.nodes[node];
    if (n.dead || n.kind != Node::Kind::kOp || n.outputs.size() != 1 || n.args.empty() ||
        n.args[0].kind != Arg::Kind::kTensor || SoleUser(uses, node) != steps.back()) {
      return nullptr;
    }
    return &n;
  };
  const Node* n = sole_arg(at);
  if (n != nullptr && n->target == "aten.clone.default") {
    for (size_t a = 1; a < n->args.size(); ++a) {
      if (n->args[a].kind == Arg::Kind::kMemoryFormat && n->args[a].i == 2) return std::nullopt;
    }
    steps.push_back(at);
    at = n->args[0].tensor.node;
    n = sole_arg(at);
  }
  if (n == nullptr || n->target != "aten.permute.default" || n->args.size() != 2 ||
      n->args[1].kind != Arg::Kind::kList || n->args[1].list.size() != 5) {
    return std::nullopt;
  }
  const std::array<int64_t, 5> swap = {0, 2, 1, 3, 4};
  for (int d = 0; d < 5; ++d) {
    const Arg& a = n->args[1].list[d];
    if (a.kind != Arg::Kind::kInt || (a.i < 0 ? a.i + 5 : a.i) != swap[d]) return std::nullopt;
  }
  steps.push_back(at);
  at = n->args[0].tensor.node;
  n = sole_arg(at);
  if (n == nullptr || !IsView(*n) || n->outputs[0].rank() != 5) return std::nullopt;
  steps.push_back(at);
  const ValueRef x = n->args[0].tensor;
  const TensorMeta& in = g.MetaOf(x);
  const std::vector<int64_t>& v = n->outputs[0].shape;  // [N, g, C/g, H, W]
  if (in.rank() != 4 || in.shape != y.outputs[0].shape || v[0] != in.shape[0] ||
      v[1] * v[2] != in.shape[1] || v[3] != in.shape[2] || v[4] != in.shape[3]) {
    return std::nullopt;
  }
  std::reverse(steps.begin(), steps.end());
  return ShuffleChain{x, steps, v[1]};
}

absl::flat_hash_map<int, ShuffleChain> FindShuffles(const Graph& g, const Uses& uses) {
  absl::flat_hash_map<int, ShuffleChain> chains;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (std::optional<ShuffleChain> chain = MatchShuffle(g, uses, i)) chains.emplace(i, *chain);
  }
  return chains;
}

}  // namespace kiln::runtime::channels_last
