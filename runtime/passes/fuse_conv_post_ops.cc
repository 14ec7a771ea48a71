// Fuses what follows a convolution into it: a residual add of a tensor of
// the output's shape and elementwise activations (see
// kernels/post_ops.h), single nodes or decomposed into several (silu,
// hardswish, hardsigmoid; see activation_patterns.h), producing
// kiln.conv2d. The fused node takes the
// place of the last node it absorbs, so every input it needs (a residual
// computed after the convolution, say) is ready when it runs.
#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/activation_patterns.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// kiln.conv2d's arguments (ops.def), up to post_ops: the layout pass adds
// the rest.
constexpr ArgSlot kInput = KILN_ARG("kiln.conv2d", "input");
constexpr ArgSlot kWeight = KILN_ARG("kiln.conv2d", "weight");
constexpr ArgSlot kBias = KILN_ARG("kiln.conv2d", "bias");
constexpr ArgSlot kStride = KILN_ARG("kiln.conv2d", "stride");
constexpr ArgSlot kPadding = KILN_ARG("kiln.conv2d", "padding");
constexpr ArgSlot kDilation = KILN_ARG("kiln.conv2d", "dilation");
constexpr ArgSlot kGroups = KILN_ARG("kiln.conv2d", "groups");
constexpr ArgSlot kResidual = KILN_ARG("kiln.conv2d", "residual");
constexpr ArgSlot kPostOps = KILN_ARG("kiln.conv2d", "post_ops");

// aten.convolution args (input, weight, bias, stride, padding, dilation,
// transposed, output_padding, groups) -> kiln.conv2d args.
bool ToFusedArgs(const Node& conv, std::vector<Arg>* out) {
  if (conv.target == "kiln.conv2d") {
    *out = conv.args;
    return true;
  }
  if (conv.target != "aten.convolution.default" || conv.args.size() != 9 ||
      !conv.kwargs.empty() || conv.args[6].kind != Arg::Kind::kBool || conv.args[6].b) {
    return false;
  }
  std::vector<Arg>& a = *out;
  a.assign(kPostOps.pos + 1, NoneArg());
  a[kInput.pos] = conv.args[0];
  a[kWeight.pos] = conv.args[1];
  a[kBias.pos] = conv.args[2];
  a[kStride.pos] = conv.args[3];
  a[kPadding.pos] = conv.args[4];
  a[kDilation.pos] = conv.args[5];
  a[kGroups.pos] = conv.args[8];
  a[kPostOps.pos] = ListArg({});
  return true;
}

// The alpha of an add.Tensor node is 1 (absent or literal 1).
bool AlphaIsOne(const Node& add) {
  for (const NamedArg& kw : add.kwargs) {
    if (kw.name != "alpha") return false;
    if (!((kw.value.kind == Arg::Kind::kInt && kw.value.i == 1) ||
          (kw.value.kind == Arg::Kind::kFloat && kw.value.f == 1.0))) {
      return false;
    }
  }
  return add.args.size() == 2;
}

}  // namespace

absl::Status FuseConvPostOps(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.conv2d");
  Uses uses = ComputeUses(g);
  for (int c = 0; c < static_cast<int>(g.nodes.size()); ++c) {
    std::vector<Arg> args;
    if (g.nodes[c].dead || !ToFusedArgs(g.nodes[c], &args)) continue;
    const TensorMeta out_meta = g.nodes[c].outputs[0];
    std::string name = g.nodes[c].name;
    int cur = c;
    bool has_residual = args[kResidual.pos].kind != Arg::Kind::kNone;
    while (!uses.is_output[cur][0]) {
      if (std::optional<ActivationMatch> m = MatchActivation(g, uses, {cur, 0})) {
        args[kPostOps.pos].list.push_back(StringArg(m->post_op));
        for (int n : m->nodes) {
          name = absl::StrCat(name, "+", g.nodes[n].name);
          g.nodes[n].dead = true;
        }
        g.nodes[cur].dead = true;
        cur = m->last;
        continue;
      }
      if (uses.Count({cur, 0}) != 1) break;
      const int u = uses.users[cur][0][0];
      const Node& user = g.nodes[u];
      if (user.dead) break;
      if (user.target != "aten.add.Tensor" || has_residual || !AlphaIsOne(user) ||
          user.args[0].kind != Arg::Kind::kTensor || user.args[1].kind != Arg::Kind::kTensor ||
          user.args[0].tensor == user.args[1].tensor) {
        break;
      }
      const ValueRef other =
          user.args[0].tensor == ValueRef{cur, 0} ? user.args[1].tensor : user.args[0].tensor;
      if (g.MetaOf(other) != out_meta) break;
      args[kResidual.pos] = TensorArg(other);
      args[kPostOps.pos].list.push_back(StringArg("add"));
      has_residual = true;
      name = absl::StrCat(name, "+", user.name);
      g.nodes[cur].dead = true;
      cur = u;
    }
    if (cur == c && g.nodes[c].target == "kiln.conv2d") continue;
    // Rewrite node `cur` (the conv itself when nothing followed) in place.
    Node& fused = g.nodes[cur];
    fused.dead = false;
    fused.target = "kiln.conv2d";
    fused.op_index = fused_index;
    fused.args = std::move(args);
    fused.kwargs.clear();
    fused.name = name;
    fused.outputs = {out_meta};
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
