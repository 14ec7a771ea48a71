// Fuses what follows a convolution into it: a residual add of a tensor of
// the output's shape, elementwise activations (see kernels/post_ops.h),
// single nodes or decomposed into several (silu, hardswish, hardsigmoid;
// see activation_patterns.h), and a constant inference batch norm after
// an activation (ConvMixer's conv -> GELU -> batch norm), which
// FoldBatchNorm cannot fold into the weights: it becomes a
// "channel_affine" post-op, x * scale + shift per output channel, instead
// of a pass of its own over the activations. Produces kiln.conv2d. The
// fused node takes the place of the last node it absorbs, so every input
// it needs (a residual computed after the convolution, say) is ready when
// it runs.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/activation_patterns.h"
#include "runtime/passes/constant_batch_norm.h"
#include "runtime/passes/pass_context.h"
#include "runtime/util/status_macros.h"

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

// The per-channel scale and shift of batch norm `b` as constants (shared
// like FoldBatchNorm's); DATA_LOSS when saved bytes they derive from fail
// their checks.
absl::StatusOr<std::pair<int, int>> AffineConstants(PassContext& ctx, int b,
                                                    const ConstantBatchNorm& m) {
  // A copy: adding constants grows the node list.
  const Node bn = ctx.graph.nodes[b];
  const std::string recipe = DerivationRecipe(ctx, "batch_norm_affine", m.eps,
                                              {{&bn, 1}, {&bn, 2}, {&bn, 3}, {&bn, 4}});
  const std::string s_key = recipe.empty() ? "" : DerivedConstantKey(absl::StrCat(recipe, "|scale"));
  const std::string t_key = recipe.empty() ? "" : DerivedConstantKey(absl::StrCat(recipe, "|shift"));
  const std::string s_name = absl::StrCat(bn.name, ".channel_scale");
  const std::string t_name = absl::StrCat(bn.name, ".channel_shift");
  const TensorMeta meta{DType::kF32, {m.channels}};
  std::optional<ConstantData> found_s = ctx.FindDerived(s_key, meta);
  std::optional<ConstantData> found_t = found_s ? ctx.FindDerived(t_key, meta) : std::nullopt;
  if (found_s && found_t) {
    return std::make_pair(ctx.AddFoundConstant(s_name, meta, s_key, *std::move(found_s)),
                          ctx.AddFoundConstant(t_name, meta, t_key, *std::move(found_t)));
  }
  for (const float* p : m.Data()) {
    if (!CheckBeforeRead(p)) return BadSavedConstant(bn);
  }
  auto [si, s_bytes] = ctx.AddUninitializedConstant(s_name, meta, s_key);
  auto [ti, t_bytes] = ctx.AddUninitializedConstant(t_name, meta, t_key);
  float* scale = static_cast<float*>(s_bytes);
  float* shift = static_cast<float*>(t_bytes);
  // In double, then rounded once, as FoldBatchNorm does.
  for (int64_t c = 0; c < m.channels; ++c) {
    const double s = m.Scale(c);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(m.Beta(c) - m.mean[c] * s);
  }
  return std::make_pair(si, ti);
}

// An activation applied to a concatenation of convolutions, each read by
// the concatenation alone, is applied by each convolution instead:
// act(cat(conv_i)) = cat(act(conv_i)) (MixNet's mixed-kernel blocks end in
// cat -> batch norm -> swish, and the batch norm folds into the
// convolutions).
void MoveActivationsIntoConcatenatedConvs(Graph& g, int fused_index) {
  Uses uses = ComputeUses(g);
  for (int c = 0; c < static_cast<int>(g.nodes.size()); ++c) {
    const Node& cat = g.nodes[c];
    if (cat.dead || cat.target != "aten.cat.default" || cat.args.empty() ||
        cat.args[0].kind != Arg::Kind::kList || cat.args[0].list.empty()) {
      continue;
    }
    std::vector<std::vector<Arg>> args;
    for (const Arg& item : cat.args[0].list) {
      std::vector<Arg> a;
      if (item.kind != Arg::Kind::kTensor || item.tensor.output != 0 ||
          uses.Count(item.tensor) != 1 || !ToFusedArgs(g.nodes[item.tensor.node], &a)) {
        args.clear();
        break;
      }
      args.push_back(std::move(a));
    }
    if (args.size() != cat.args[0].list.size()) continue;
    std::optional<ActivationMatch> m = MatchActivation(g, uses, {c, 0});
    if (!m) continue;
    std::string act_names;
    for (int n : m->nodes) absl::StrAppend(&act_names, "+", g.nodes[n].name);
    for (size_t i = 0; i < args.size(); ++i) {
      const int conv = g.nodes[c].args[0].list[i].tensor.node;
      args[i][conv2d_arg::kPostOps.pos].list.push_back(StringArg(m->post_op));
      const TensorMeta out = g.nodes[conv].outputs[0];
      BecomeFused(g, conv, "kiln.conv2d", fused_index, std::move(args[i]),
                  absl::StrCat(g.nodes[conv].name, act_names), out);
    }
    for (int n : m->nodes) g.nodes[n].dead = true;
    ReplaceAllUses(g, {m->last, 0}, {c, 0});
    uses = ComputeUses(g);
  }
}

}  // namespace

absl::Status FuseConvPostOps(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.conv2d");
  MoveActivationsIntoConcatenatedConvs(g, fused_index);
  Uses uses = ComputeUses(g);
  for (int c = 0; c < static_cast<int>(g.nodes.size()); ++c) {
    std::vector<Arg> args;
    if (g.nodes[c].dead || !ToFusedArgs(g.nodes[c], &args)) continue;
    const TensorMeta out_meta = g.nodes[c].outputs[0];
    std::string name = g.nodes[c].name;
    int cur = c;
    bool has_residual = args[conv2d_arg::kResidual.pos].kind != Arg::Kind::kNone;
    bool has_affine = args.size() > conv2d_arg::kChannelScale.pos &&
                      args[conv2d_arg::kChannelScale.pos].kind != Arg::Kind::kNone;
    while (!uses.is_output[cur][0]) {
      if (std::optional<ActivationMatch> m = MatchActivation(g, uses, {cur, 0})) {
        AbsorbActivation(g, *m, &args[conv2d_arg::kPostOps.pos], &name, &cur);
        continue;
      }
      if (uses.Count({cur, 0}) != 1) break;
      const int u = uses.users[cur][0][0];
      const Node& user = g.nodes[u];
      if (user.dead) break;
      // A batch norm right after the convolution itself was folded into
      // its weights when they are constants; one after an activation or
      // the residual add becomes the affine post-op.
      if (!has_affine && out_meta.rank() >= 2) {
        if (std::optional<ConstantBatchNorm> m = MatchConstantBatchNorm(ctx, uses, u);
            m && m->input == ValueRef{cur, 0} && m->channels == out_meta.shape[1]) {
          KILN_ASSIGN_OR_RETURN(auto constants, AffineConstants(ctx, u, *m));
          if (args.size() <= conv2d_arg::kChannelShift.pos) {
            args.resize(conv2d_arg::kChannelShift.pos + 1, NoneArg());
          }
          args[conv2d_arg::kChannelScale.pos] = TensorArg({constants.first, 0});
          args[conv2d_arg::kChannelShift.pos] = TensorArg({constants.second, 0});
          args[conv2d_arg::kPostOps.pos].list.push_back(StringArg("channel_affine"));
          has_affine = true;
          name = absl::StrCat(name, "+", g.nodes[u].name);
          g.nodes[cur].dead = true;
          // The batch norm's other outputs are unused: its node becomes
          // the fused one, with one output.
          cur = u;
          uses = ComputeUses(g);
          continue;
        }
      }
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
