// Folds inference batch norm into the convolution that feeds it:
//   bn(conv(x, W, b)) = conv(x, W * s, (b - mean) * s + beta),
//   s = gamma / sqrt(var + eps), per output channel,
// when the convolution's only user is the batch norm, every parameter is a
// constant, and the batch norm's saved-statistics outputs are unused.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/parallel.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// Weight elements per parallel chunk of a fold: enough to outweigh
// handing the chunk to another thread.
constexpr int64_t kFoldGrainElements = 64 * 1024;

// A tensor argument that is a constant of `numel` f32 values, or null.
const float* ConstantF32(const PassContext& ctx, const Node& node, int pos, int64_t numel) {
  if (pos >= static_cast<int>(node.args.size())) return nullptr;
  const Arg& a = node.args[pos];
  if (a.kind != Arg::Kind::kTensor || a.tensor.output != 0) return nullptr;
  const TensorMeta& meta = ctx.graph.MetaOf(a.tensor);
  if (meta.dtype != DType::kF32 || meta.NumElements() != numel) return nullptr;
  return static_cast<const float*>(ctx.constant_data[a.tensor.node]);
}

bool ArgIsNone(const Node& node, int pos) {
  return pos >= static_cast<int>(node.args.size()) || node.args[pos].kind == Arg::Kind::kNone;
}

bool LiteralFloat(const Node& node, int pos, double* out) {
  if (pos >= static_cast<int>(node.args.size())) return false;
  const Arg& a = node.args[pos];
  if (a.kind == Arg::Kind::kFloat) *out = a.f;
  else if (a.kind == Arg::Kind::kInt) *out = static_cast<double>(a.i);
  else return false;
  return true;
}

// How the folded weight and bias are computed, for their share keys
// (compile/shared_constants.h): eps and the share keys and shapes of the
// convolution's weight and bias and the batch norm's four tensors. Empty
// when one of them has no share key.
std::string FoldRecipe(const PassContext& ctx, const Node& conv, const Node& bn, double eps) {
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof eps_bits);
  std::string recipe = absl::StrCat("batch_norm_fold|", eps_bits);
  const std::pair<const Node*, int> inputs[] = {{&conv, 1}, {&conv, 2}, {&bn, 1},
                                                {&bn, 2},    {&bn, 3},   {&bn, 4}};
  for (const auto& [node, pos] : inputs) {
    if (ArgIsNone(*node, pos)) {
      absl::StrAppend(&recipe, "|none");
      continue;
    }
    const ValueRef ref = node->args[pos].tensor;
    const std::string& key = ctx.graph.nodes[ref.node].share_key;
    if (key.empty()) return "";
    absl::StrAppend(&recipe, "|", key, ":", ctx.graph.MetaOf(ref).ToString());
  }
  return recipe;
}

}  // namespace

absl::Status FoldBatchNorm(PassContext& ctx) {
  Graph& g = ctx.graph;
  Uses uses = ComputeUses(g);
  const int n = static_cast<int>(g.nodes.size());
  for (int b = 0; b < n; ++b) {
    // Copies, not references: AddConstant grows g.nodes.
    const Node bn = g.nodes[b];
    if (bn.dead || bn.kind != Node::Kind::kOp || !bn.kwargs.empty()) continue;
    int eps_pos;
    if (bn.target == "aten.native_batch_norm.default") {
      if (bn.args.size() != 8 || bn.args[5].kind != Arg::Kind::kBool || bn.args[5].b) continue;
      eps_pos = 7;
    } else if (bn.target == "aten._native_batch_norm_legit_no_training.default") {
      if (bn.args.size() != 7) continue;
      eps_pos = 6;
    } else {
      continue;
    }
    if (bn.args[0].kind != Arg::Kind::kTensor) continue;
    const ValueRef conv_out = bn.args[0].tensor;
    const Node conv = g.nodes[conv_out.node];
    if (conv.dead || conv.target != "aten.convolution.default" || conv.args.size() != 9 ||
        !conv.kwargs.empty() || conv.args[6].kind != Arg::Kind::kBool || conv.args[6].b) {
      continue;
    }
    if (uses.Count(conv_out) != 1 || uses.Count({b, 1}) != 0 || uses.Count({b, 2}) != 0) continue;
    if (conv.args[1].kind != Arg::Kind::kTensor) continue;
    const TensorMeta wmeta = g.MetaOf(conv.args[1].tensor);
    if (wmeta.rank() < 1) continue;
    const int64_t oc = wmeta.shape[0];
    const int64_t per_oc = oc == 0 ? 0 : wmeta.NumElements() / oc;
    const float* w = ConstantF32(ctx, conv, 1, wmeta.NumElements());
    const float* cb = ArgIsNone(conv, 2) ? nullptr : ConstantF32(ctx, conv, 2, oc);
    const float* gamma = ArgIsNone(bn, 1) ? nullptr : ConstantF32(ctx, bn, 1, oc);
    const float* beta = ArgIsNone(bn, 2) ? nullptr : ConstantF32(ctx, bn, 2, oc);
    const float* mean = ConstantF32(ctx, bn, 3, oc);
    const float* var = ConstantF32(ctx, bn, 4, oc);
    double eps = 0;
    if (w == nullptr || mean == nullptr || var == nullptr || !LiteralFloat(bn, eps_pos, &eps) ||
        (!ArgIsNone(conv, 2) && cb == nullptr) || (!ArgIsNone(bn, 1) && gamma == nullptr) ||
        (!ArgIsNone(bn, 2) && beta == nullptr)) {
      continue;
    }
    // Written straight into the new constants (for resnet50 that is 100 MB
    // of fresh memory), split by output channel across the compile's
    // threads. In double, then rounded once: matches eager's two roundings
    // within a few ulps.
    const std::string recipe = FoldRecipe(ctx, conv, bn, eps);
    const std::string w_key = recipe.empty() ? "" : DerivedConstantKey(absl::StrCat(recipe, "|weight"));
    const std::string b_key = recipe.empty() ? "" : DerivedConstantKey(absl::StrCat(recipe, "|bias"));
    const std::string w_name = absl::StrCat(conv.name, ".folded_weight");
    const std::string b_name = absl::StrCat(conv.name, ".folded_bias");
    const TensorMeta bmeta{DType::kF32, {oc}};
    // Derived before (another graph holds them, or a warm start finds them
    // saved): nothing to compute.
    std::optional<ConstantData> found_w = ctx.FindDerived(w_key, wmeta);
    std::optional<ConstantData> found_b = found_w ? ctx.FindDerived(b_key, bmeta) : std::nullopt;
    int wi, bi;
    if (found_w && found_b) {
      wi = ctx.AddFoundConstant(w_name, wmeta, w_key, *std::move(found_w));
      bi = ctx.AddFoundConstant(b_name, bmeta, b_key, *std::move(found_b));
    } else {
      for (const float* p : {w, cb, gamma, beta, mean, var}) {
        if (!CheckBeforeRead(p)) return BadSavedConstant(conv);
      }
      void* w_bytes;
      void* b_bytes;
      std::tie(wi, w_bytes) = ctx.AddUninitializedConstant(w_name, wmeta, w_key);
      std::tie(bi, b_bytes) = ctx.AddUninitializedConstant(b_name, bmeta, b_key);
      float* new_w = static_cast<float*>(w_bytes);
      float* new_b = static_cast<float*>(b_bytes);
      const int64_t grain = std::max<int64_t>(1, kFoldGrainElements / std::max<int64_t>(per_oc, 1));
      ParallelFor(oc, grain, [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          const double s = (gamma ? gamma[o] : 1.0) / std::sqrt(static_cast<double>(var[o]) + eps);
          for (int64_t k = 0; k < per_oc; ++k) {
            new_w[o * per_oc + k] = static_cast<float>(w[o * per_oc + k] * s);
          }
          new_b[o] = static_cast<float>(((cb ? cb[o] : 0.0) - mean[o]) * s + (beta ? beta[o] : 0.0));
        }
      });
    }
    Node& c = g.nodes[conv_out.node];
    c.args[1].tensor = {wi, 0};
    c.args[2] = TensorArg({bi, 0});
    c.name = absl::StrCat(c.name, "+", bn.name);
    g.nodes[b].dead = true;
    ReplaceAllUses(g, {b, 0}, conv_out);
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
