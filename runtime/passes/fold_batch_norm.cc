// Folds inference batch norm into the convolution that feeds it:
//   bn(conv(x, W, b)) = conv(x, W * s, (b - mean) * s + beta),
//   s = gamma / sqrt(var + eps), per output channel,
// when the convolution's only user is the batch norm, every parameter is a
// constant, and the batch norm's saved-statistics outputs are unused.
#include <algorithm>
#include <optional>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/parallel.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/passes/constant_batch_norm.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// Weight elements per parallel chunk of a fold: enough to outweigh
// handing the chunk to another thread.
constexpr int64_t kFoldGrainElements = 64 * 1024;

}  // namespace

absl::Status FoldBatchNorm(PassContext& ctx) {
  Graph& g = ctx.graph;
  Uses uses = ComputeUses(g);
  const int n = static_cast<int>(g.nodes.size());
  for (int b = 0; b < n; ++b) {
    std::optional<ConstantBatchNorm> m = MatchConstantBatchNorm(ctx, uses, b);
    if (!m) continue;
    // Copies, not references: AddConstant grows g.nodes.
    const Node bn = g.nodes[b];
    const ValueRef conv_out = m->input;
    const Node conv = g.nodes[conv_out.node];
    if (conv.dead || conv.target != "aten.convolution.default" || conv.args.size() != 9 ||
        !conv.kwargs.empty() || conv.args[6].kind != Arg::Kind::kBool || conv.args[6].b) {
      continue;
    }
    if (uses.Count(conv_out) != 1) continue;
    if (conv.args[1].kind != Arg::Kind::kTensor) continue;
    const TensorMeta wmeta = g.MetaOf(conv.args[1].tensor);
    if (wmeta.rank() < 1 || wmeta.shape[0] != m->channels) continue;
    const int64_t oc = wmeta.shape[0];
    const int64_t per_oc = oc == 0 ? 0 : wmeta.NumElements() / oc;
    const float* w = ConstantF32Arg(ctx, conv, 1, wmeta.NumElements());
    const float* cb = conv.args[2].kind == Arg::Kind::kNone ? nullptr : ConstantF32Arg(ctx, conv, 2, oc);
    if (w == nullptr || (conv.args[2].kind != Arg::Kind::kNone && cb == nullptr)) continue;
    // Written straight into the new constants (for resnet50 that is 100 MB
    // of fresh memory), split by output channel across the compile's
    // threads. In double, then rounded once: matches eager's two roundings
    // within a few ulps.
    const std::string recipe =
        DerivationRecipe(ctx, "batch_norm_fold", m->eps,
                         {{&conv, 1}, {&conv, 2}, {&bn, 1}, {&bn, 2}, {&bn, 3}, {&bn, 4}});
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
      for (const float* p : m->Data()) {
        if (!CheckBeforeRead(p)) return BadSavedConstant(conv);
      }
      for (const float* p : {w, cb}) {
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
          const double s = m->Scale(o);
          for (int64_t k = 0; k < per_oc; ++k) {
            new_w[o * per_oc + k] = static_cast<float>(w[o * per_oc + k] * s);
          }
          new_b[o] = static_cast<float>(((cb ? cb[o] : 0.0) - m->mean[o]) * s + m->Beta(o));
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
