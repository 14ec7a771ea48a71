// Folds inference batch norm into the convolution that feeds it:
//   bn(conv(x, W, b)) = conv(x, W * s, (b - mean) * s + beta),
//   s = gamma / sqrt(var + eps), per output channel,
// when the convolution's only user is the batch norm, every parameter is a
// constant, and the batch norm's saved-statistics outputs are unused; and
// into each convolution of a channel concatenation the batch norm alone
// reads, each with its channels' slice of the parameters.
#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/parallel.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/passes/constant_batch_norm.h"
#include "runtime/passes/pass_context.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Weight elements per parallel chunk of a fold: enough to outweigh
// handing the chunk to another thread.
constexpr int64_t kFoldGrainElements = 64 * 1024;

// The convolution producing `out` when the batch norm may fold into it:
// a plain (not transposed) aten.convolution whose output only `readers`
// read, with constant weights (and bias) of `oc` output channels.
struct FoldableConv {
  int node = -1;
  const float* w = nullptr;
  const float* bias = nullptr;  // null: none
  TensorMeta wmeta;
};

std::optional<FoldableConv> MatchConv(const PassContext& ctx, const Uses& uses, ValueRef out,
                                      int64_t oc) {
  const Graph& g = ctx.graph;
  const Node& conv = g.nodes[out.node];
  if (conv.dead || conv.target != "aten.convolution.default" || conv.args.size() != 9 ||
      !conv.kwargs.empty() || conv.args[6].kind != Arg::Kind::kBool || conv.args[6].b ||
      uses.Count(out) != 1 || conv.args[1].kind != Arg::Kind::kTensor) {
    return std::nullopt;
  }
  FoldableConv f;
  f.node = out.node;
  f.wmeta = g.MetaOf(conv.args[1].tensor);
  if (f.wmeta.rank() < 1 || f.wmeta.shape[0] != oc) return std::nullopt;
  f.w = ConstantF32Arg(ctx, conv, 1, f.wmeta.NumElements());
  const bool has_bias = conv.args[2].kind != Arg::Kind::kNone;
  f.bias = has_bias ? ConstantF32Arg(ctx, conv, 2, oc) : nullptr;
  if (f.w == nullptr || (has_bias && f.bias == nullptr)) return std::nullopt;
  return f;
}

// Folds channels [first, first + oc) of batch norm `b` into the
// convolution; false when saved bytes failed their checks.
absl::Status FoldInto(PassContext& ctx, int b, const ConstantBatchNorm& m, const FoldableConv& f,
                      int64_t first) {
  Graph& g = ctx.graph;
  // Copies, not references: AddConstant grows g.nodes.
  const Node bn = g.nodes[b];
  const Node conv = g.nodes[f.node];
  const TensorMeta wmeta = f.wmeta;
  const int64_t oc = wmeta.shape[0];
  const int64_t per_oc = oc == 0 ? 0 : wmeta.NumElements() / oc;
  // Written straight into the new constants (for resnet50 that is 100 MB
  // of fresh memory), split by output channel across the compile's
  // threads. In double, then rounded once: matches eager's two roundings
  // within a few ulps.
  std::string recipe =
      DerivationRecipe(ctx, "batch_norm_fold", m.eps,
                       {{&conv, 1}, {&conv, 2}, {&bn, 1}, {&bn, 2}, {&bn, 3}, {&bn, 4}});
  if (!recipe.empty() && (first != 0 || oc != m.channels)) {
    absl::StrAppend(&recipe, "|channels ", first, "+", oc);
  }
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
    for (const float* p : m.Data()) {
      if (!CheckBeforeRead(p)) return BadSavedConstant(conv);
    }
    for (const float* p : {f.w, f.bias}) {
      if (!CheckBeforeRead(p)) return BadSavedConstant(conv);
    }
    void* w_bytes;
    void* b_bytes;
    std::tie(wi, w_bytes) = ctx.AddUninitializedConstant(w_name, wmeta, w_key);
    std::tie(bi, b_bytes) = ctx.AddUninitializedConstant(b_name, bmeta, b_key);
    float* new_w = static_cast<float*>(w_bytes);
    float* new_b = static_cast<float*>(b_bytes);
    const float* w = f.w;
    const float* cb = f.bias;
    const int64_t grain = std::max<int64_t>(1, kFoldGrainElements / std::max<int64_t>(per_oc, 1));
    ParallelFor(oc, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const double s = m.Scale(first + o);
        for (int64_t k = 0; k < per_oc; ++k) {
          new_w[o * per_oc + k] = static_cast<float>(w[o * per_oc + k] * s);
        }
        new_b[o] = static_cast<float>(((cb ? cb[o] : 0.0) - m.mean[first + o]) * s +
                                      m.Beta(first + o));
      }
    });
  }
  Node& c = g.nodes[f.node];
  c.args[1].tensor = {wi, 0};
  c.args[2] = TensorArg({bi, 0});
  c.name = absl::StrCat(c.name, "+", bn.name);
  return absl::OkStatus();
}

// The convolutions of a channel concatenation `cat_out` (aten.cat over dim
// 1 that only the batch norm reads), each with its first channel; empty
// when one input is no foldable convolution.
std::vector<std::pair<FoldableConv, int64_t>> MatchCatOfConvs(const PassContext& ctx,
                                                              const Uses& uses, ValueRef cat_out) {
  const Graph& g = ctx.graph;
  const Node& cat = g.nodes[cat_out.node];
  if (cat.dead || cat.target != "aten.cat.default" || !cat.kwargs.empty() ||
      cat.args.size() != 2 || cat.args[0].kind != Arg::Kind::kList ||
      cat.args[1].kind != Arg::Kind::kInt || uses.Count(cat_out) != 1) {
    return {};
  }
  const int64_t rank = g.MetaOf(cat_out).rank();
  if (rank < 2 || (cat.args[1].i != 1 && cat.args[1].i != 1 - rank)) return {};
  std::vector<std::pair<FoldableConv, int64_t>> convs;
  int64_t first = 0;
  for (const Arg& item : cat.args[0].list) {
    if (item.kind != Arg::Kind::kTensor) return {};
    const TensorMeta& meta = g.MetaOf(item.tensor);
    if (meta.rank() != rank) return {};
    std::optional<FoldableConv> f = MatchConv(ctx, uses, item.tensor, meta.shape[1]);
    // The same convolution twice in the cat would be folded twice.
    if (!f) return {};
    for (const auto& [other, at] : convs) {
      if (other.node == f->node) return {};
    }
    convs.emplace_back(*f, first);
    first += meta.shape[1];
  }
  return convs;
}

}  // namespace

absl::Status FoldBatchNorm(PassContext& ctx) {
  Graph& g = ctx.graph;
  Uses uses = ComputeUses(g);
  const int n = static_cast<int>(g.nodes.size());
  for (int b = 0; b < n; ++b) {
    std::optional<ConstantBatchNorm> m = MatchConstantBatchNorm(ctx, uses, b);
    if (!m) continue;
    const ValueRef in = m->input;
    if (std::optional<FoldableConv> f = MatchConv(ctx, uses, in, m->channels)) {
      KILN_RETURN_IF_ERROR(FoldInto(ctx, b, *m, *f, 0));
    } else if (auto convs = MatchCatOfConvs(ctx, uses, in); !convs.empty()) {
      // bn(cat(conv_i)) = cat(bn_i(conv_i)): each convolution takes its
      // slice of the batch norm (MixNet's mixed-kernel blocks).
      for (const auto& [conv, first] : convs) {
        KILN_RETURN_IF_ERROR(FoldInto(ctx, b, *m, conv, first));
      }
    } else {
      continue;
    }
    g.nodes[b].dead = true;
    ReplaceAllUses(g, {b, 0}, in);
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
