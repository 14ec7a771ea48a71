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
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/activation_patterns.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

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
  // kiln.conv2d is 1-D and 2-D only (3-D stays aten.convolution).
  if (conv.outputs.empty() || conv.outputs[0].rank() > 4) return false;
  std::vector<Arg>& a = *out;
  a.assign(conv2d_arg::kPostOps.pos + 1, NoneArg());
  a[conv2d_arg::kInput.pos] = conv.args[0];
  a[conv2d_arg::kWeight.pos] = conv.args[1];
  a[conv2d_arg::kBias.pos] = conv.args[2];
  a[conv2d_arg::kStride.pos] = conv.args[3];
  a[conv2d_arg::kPadding.pos] = conv.args[4];
  a[conv2d_arg::kDilation.pos] = conv.args[5];
  a[conv2d_arg::kGroups.pos] = conv.args[8];
  a[conv2d_arg::kPostOps.pos] = ListArg({});
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
    bool has_residual = args[conv2d_arg::kResidual.pos].kind != Arg::Kind::kNone;
    while (!uses.is_output[cur][0]) {
      if (std::optional<ActivationMatch> m = MatchActivation(g, uses, {cur, 0})) {
        AbsorbActivation(g, *m, &args[conv2d_arg::kPostOps.pos], &name, &cur);
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
      args[conv2d_arg::kResidual.pos] = TensorArg(other);
      args[conv2d_arg::kPostOps.pos].list.push_back(StringArg("add"));
      has_residual = true;
      name = absl::StrCat(name, "+", user.name);
      g.nodes[cur].dead = true;
      cur = u;
    }
    if (cur == c && g.nodes[c].target == "kiln.conv2d") continue;
    // Rewrite node `cur` (the conv itself when nothing followed) in place.
    BecomeFused(g, cur, "kiln.conv2d", fused_index, std::move(args), std::move(name), out_meta);
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
