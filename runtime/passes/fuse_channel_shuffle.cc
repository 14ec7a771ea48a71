// Shufflenet's channel shuffle of a concatenation, in channels-last order
// (as passes/channels_last.cc leaves it):
//
//   cat([a, b], 3) -> view [N, H, W, 2, C] -> permute [0, 1, 2, 4, 3]
//     -> (clone) -> view [N, H, W, 2C] -> (split_with_sizes(., even sizes, 3))
//
// is a's and b's channels interleaved, a0 b0 a1 b1 ..., cut into the
// split's pieces: one kiln.interleave_channels node replacing three passes
// over the bytes (the cat, the permute, the split). a and b must have one
// shape (shufflenet's halves); each step must be read by the next alone.
// Runs after output metas were inferred again following the layout pass.
#include <array>
#include <optional>

#include "absl/strings/str_cat.h"

#include "runtime/ir/arg_builders.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// The live op node whose only output is read by `user` alone, once.
const Node* SoleProducer(const Graph& g, const Uses& uses, ValueRef v, int user) {
  if (v.node < 0 || v.output != 0) return nullptr;
  const Node& n = g.nodes[v.node];
  if (n.dead || n.kind != Node::Kind::kOp || n.outputs.size() != 1 || uses.is_output[v.node][0] ||
      uses.users[v.node][0].size() != 1 || uses.users[v.node][0][0] != user) {
    return nullptr;
  }
  return &n;
}

// -1 when `a` is not an int (or int list item); the dimension wrapped
// into [0, rank) otherwise.
int64_t Dim(const Arg& a, int64_t rank) {
  if (a.kind != Arg::Kind::kInt) return -1;
  const int64_t d = a.i < 0 ? a.i + rank : a.i;
  return d >= 0 && d < rank ? d : -1;
}

struct Shuffle {
  ValueRef a, b;
  std::vector<int> chain;  // cat, views, permute, clone: dead once fused
};

// The chain ending at view node `last`, when it is a two-group shuffle of
// a cat of two same-shaped channels-last tensors.
std::optional<Shuffle> MatchShuffle(const Graph& g, const Uses& uses, int last) {
  const Node& y = g.nodes[last];
  if (y.dead || !HasTrait(y, kReshape) || y.args.empty() || y.args[0].kind != Arg::Kind::kTensor ||
      y.outputs.size() != 1 || y.outputs[0].rank() != 4 || y.outputs[0].dtype != DType::kF32) {
    return std::nullopt;
  }
  Shuffle s;
  int at = last;
  const Node* n = SoleProducer(g, uses, y.args[0].tensor, at);
  if (n != nullptr && n->target == "aten.clone.default") {
    at = y.args[0].tensor.node;
    s.chain.push_back(at);
    n = SoleProducer(g, uses, n->args[0].tensor, at);
  }
  if (n == nullptr || n->target != "aten.permute.default" || n->args.size() != 2 ||
      n->args[1].kind != Arg::Kind::kList || n->args[1].list.size() != 5) {
    return std::nullopt;
  }
  const std::array<int64_t, 5> swap = {0, 1, 2, 4, 3};
  for (int d = 0; d < 5; ++d) {
    if (Dim(n->args[1].list[d], 5) != swap[d]) return std::nullopt;
  }
  at = g.nodes[at].args[0].tensor.node;
  s.chain.push_back(at);
  const Node* groups = SoleProducer(g, uses, n->args[0].tensor, at);
  if (groups == nullptr || !HasTrait(*groups, kReshape) || groups->outputs[0].rank() != 5 ||
      groups->outputs[0].shape[3] != 2) {
    return std::nullopt;
  }
  at = n->args[0].tensor.node;
  s.chain.push_back(at);
  const Node* cat = SoleProducer(g, uses, groups->args[0].tensor, at);
  if (cat == nullptr || cat->target != "aten.cat.default" || cat->args.size() != 2 ||
      cat->args[0].kind != Arg::Kind::kList || cat->args[0].list.size() != 2 ||
      Dim(cat->args[1], 4) != 3 || cat->outputs[0] != y.outputs[0]) {
    return std::nullopt;
  }
  s.chain.push_back(groups->args[0].tensor.node);
  for (const Arg& item : cat->args[0].list) {
    if (item.kind != Arg::Kind::kTensor) return std::nullopt;
  }
  s.a = cat->args[0].list[0].tensor;
  s.b = cat->args[0].list[1].tensor;
  const TensorMeta& ma = g.MetaOf(s.a);
  if (ma != g.MetaOf(s.b) || ma.rank() != 4 || 2 * ma.shape[3] != y.outputs[0].shape[3]) {
    return std::nullopt;
  }
  return s;
}

}  // namespace

absl::Status FuseChannelShuffle(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.interleave_channels");
  Uses uses = ComputeUses(g);
  for (int v = 0; v < static_cast<int>(g.nodes.size()); ++v) {
    std::optional<Shuffle> s = MatchShuffle(g, uses, v);
    if (!s) continue;
    const int64_t channels = g.nodes[v].outputs[0].shape[3];
    // The split reading the shuffle, when it cuts even pieces along the
    // channels: computed by the fused node too.
    int target = v;
    std::vector<int64_t> sizes = {channels};
    if (!uses.is_output[v][0] && uses.users[v][0].size() == 1) {
      const int u = uses.users[v][0][0];
      const Node& split = g.nodes[u];
      bool even = split.target == "aten.split_with_sizes.default" && split.args.size() == 3 &&
                  split.kwargs.empty() && split.args[0].kind == Arg::Kind::kTensor &&
                  split.args[0].tensor == ValueRef{v, 0} &&
                  split.args[1].kind == Arg::Kind::kList && Dim(split.args[2], 4) == 3;
      std::vector<int64_t> split_sizes;
      for (size_t i = 0; even && i < split.args[1].list.size(); ++i) {
        const Arg& a = split.args[1].list[i];
        even = a.kind == Arg::Kind::kInt && a.i > 0 && a.i % 2 == 0;
        if (even) split_sizes.push_back(a.i);
      }
      if (even && !split_sizes.empty()) {
        target = u;
        sizes = std::move(split_sizes);
        g.nodes[v].dead = true;
      }
    }
    for (int n : s->chain) g.nodes[n].dead = true;
    Node& fused = g.nodes[target];
    fused.dead = false;
    fused.name = absl::StrCat(fused.name, ".interleaved");
    fused.target = "kiln.interleave_channels";
    fused.op_index = fused_index;
    fused.args.assign(interleave_channels_arg::kSplitSizes.pos + 1, NoneArg());
    fused.args[interleave_channels_arg::kA.pos] = TensorArg(s->a);
    fused.args[interleave_channels_arg::kB.pos] = TensorArg(s->b);
    fused.args[interleave_channels_arg::kSplitSizes.pos] = IntListArg(sizes);
    fused.kwargs.clear();
    std::vector<TensorMeta> outs;
    for (int64_t size : sizes) {
      TensorMeta m = g.MetaOf(s->a);
      m.shape[3] = size;
      outs.push_back(m);
    }
    fused.outputs = std::move(outs);
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
