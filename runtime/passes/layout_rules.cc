#include "runtime/passes/layout_rules.h"

#include <array>

#include "runtime/ir/arg_builders.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime::channels_last {
std::vector<int64_t> Padded4(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(4 - shape.size(), 1);
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

bool LayoutAmbiguous(const std::vector<int64_t>& shape, Layout layout) {
  if (shape.size() > 4) return false;
  const std::vector<int64_t> s = Padded4(shape);
  if (layout == Layout::kBlocked) return s[2] * s[3] == 1 && s[1] % kChannelBlock == 0;
  return s[1] == 1 || s[2] * s[3] == 1;
}

bool RunsInLayout(const Node& node, Layout layout) {
  const OpDef* op = OpOf(node);
  return op != nullptr &&
         FollowsLayout(op->traits, layout == Layout::kBlocked ? kFollowsBlocked : kFollowsNhwc);
}

bool IsToNhwc(const Node& node) {
  if (node.args.size() != 2 || node.args[1].kind != Arg::Kind::kList ||
      node.args[1].list.size() != 4) {
    return false;
  }
  const std::array<int64_t, 4> want = {0, 2, 3, 1};
  for (int d = 0; d < 4; ++d) {
    const Arg& a = node.args[1].list[d];
    if (a.kind != Arg::Kind::kInt || (a.i < 0 ? a.i + 4 : a.i) != want[d]) return false;
  }
  return true;
}

bool IsSplit(const Graph& g, const Node& n) {
  return (n.target == "aten.split_with_sizes.default" || n.target == "aten.slice.Tensor") &&
         !n.args.empty() && n.args[0].kind == Arg::Kind::kTensor &&
         g.MetaOf(n.args[0].tensor).rank() == 4 &&
         g.MetaOf(n.args[0].tensor).dtype == DType::kF32;
}

size_t SplitDimPos(const Node& n) { return n.target == "aten.slice.Tensor" ? 1 : 2; }

std::vector<std::vector<bool>> WantsLayout(const Graph& g, Layout layout,
                                           const absl::flat_hash_map<int, ShuffleChain>& shuffles) {
  std::vector<std::vector<bool>> wants(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) wants[i].assign(g.nodes[i].outputs.size(), false);
  for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
    const Node& node = g.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    auto mark = [&](const Arg& a) {
      if (a.kind == Arg::Kind::kTensor) wants[a.tensor.node][a.tensor.output] = true;
    };
    if (node.target == "kiln.conv2d" && node.args.size() > conv2d_arg::kPostOps.pos) {
      mark(node.args[conv2d_arg::kInput.pos]);
      mark(node.args[conv2d_arg::kResidual.pos]);
    } else if (layout == Layout::kNhwc && node.target == "aten.permute.default" &&
               IsToNhwc(node)) {
      // permute(x, [0, 2, 3, 1]) of a channels-last x is free.
      mark(node.args[0]);
    } else if (layout == Layout::kNhwc && IsSplit(g, node)) {
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        if (wants[i][o]) mark(node.args[0]);
      }
    } else if (node.target == "aten.alias.default" && node.args.size() == 1 &&
               node.args[0].kind == Arg::Kind::kTensor && wants[i][0]) {
      // An alias reads its input in whatever layout (a slice of every
      // channel, say, became one).
      mark(node.args[0]);
    } else if (layout == Layout::kNhwc && node.target == "aten.constant_pad_nd.default" &&
               !node.args.empty() && node.args[0].kind == Arg::Kind::kTensor &&
               g.MetaOf(node.args[0].tensor).rank() == 4 && wants[i][0]) {
      // Pads run channels-last in NHWC (channels_last.cc: RewritePad).
      mark(node.args[0]);
    } else if (auto chain = shuffles.find(i); chain != shuffles.end() && wants[i][0]) {
      wants[chain->second.x.node][chain->second.x.output] = true;
    } else if (RunsInLayout(node, layout) && !node.outputs.empty() &&
               (wants[i][0] || (node.outputs[0].rank() == 4 &&
                                LayoutAmbiguous(node.outputs[0].shape, layout)))) {
      // (A global pool's [N, C, 1, 1] output reads the same in both
      // layouts, so computing it from a channels-last input is free.)
      for (const ValueRef& r : TensorInputsOf(node)) wants[r.node][r.output] = true;
    }
  }
  return wants;
}

Arg* FindArg(Node& node, size_t pos, const char* name) {
  if (pos < node.args.size()) return &node.args[pos];
  for (NamedArg& kw : node.kwargs) {
    if (kw.name == name) return &kw.value;
  }
  return nullptr;
}

int WrapDim(int64_t d, int rank) { return static_cast<int>(d < 0 ? d + rank : d); }

std::optional<std::vector<int64_t>> BroadcastShape(const TensorMeta& meta, Layout layout) {
  if (meta.rank() > 4) return std::nullopt;
  const std::vector<int64_t> s = Padded4(meta.shape);
  if (layout != Layout::kBlocked) {
    if (!LayoutAmbiguous(s, layout)) return std::nullopt;
    return LayoutShape(s, layout);
  }
  if (s[1] == 1) return std::vector<int64_t>{s[0], 1, s[2], s[3], 1};
  if (s[2] * s[3] == 1 && s[1] % kChannelBlock == 0) return LayoutShape(s, layout);
  return std::nullopt;
}

bool RemapDim(Node& n, size_t pos, const char* name, Layout layout) {
  Arg* dim = FindArg(n, pos, name);
  int64_t d = 0;
  if (dim != nullptr) {
    if (dim->kind != Arg::Kind::kInt) return false;
    d = dim->i;
  }
  if (d < -4 || d > 3) return false;
  const int64_t physical = layout == Layout::kBlocked ? WrapDim(d, 4) : kToPhysical[WrapDim(d, 4)];
  if (dim != nullptr) {
    *dim = IntArg(physical);
  } else {
    n.args.resize(pos + 1);
    n.args[pos] = IntArg(physical);
  }
  return true;
}

}  // namespace kiln::runtime::channels_last
