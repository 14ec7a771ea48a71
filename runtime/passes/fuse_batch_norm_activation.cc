// Moves activations that follow a channels-last batch norm into it
// (kiln.batch_norm_nhwc's post_ops), so each row of channels is normalized
// and activated in one pass. These are the batch norms no convolution
// absorbed: densenet's norm -> relu in front of each convolution, which
// reads a concatenation. Single activation nodes and decomposed ones (see
// activation_patterns.h), as long as the post-op loops implement them; the
// fused node takes the place of the last node it absorbs.
#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/activation_patterns.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

constexpr size_t kPostOpsArg = KILN_ARG("kiln.batch_norm_nhwc", "post_ops").pos;

bool Implemented(const std::string& post_op) {
  absl::StatusOr<PostOp> op = ParsePostOp(post_op);
  return op.ok() && LoopsImplement({*op});
}

}  // namespace

absl::Status FuseBatchNormActivation(PassContext& ctx) {
  Graph& g = ctx.graph;
  Uses uses = ComputeUses(g);
  for (int b = 0; b < static_cast<int>(g.nodes.size()); ++b) {
    if (g.nodes[b].dead || g.nodes[b].target != "kiln.batch_norm_nhwc" ||
        g.nodes[b].outputs.size() != 1 || !g.nodes[b].kwargs.empty() ||
        g.nodes[b].args.size() < kPostOpsArg) {
      continue;
    }
    std::vector<Arg> args = g.nodes[b].args;
    if (args.size() == kPostOpsArg) args.push_back(ListArg({}));
    if (args[kPostOpsArg].kind != Arg::Kind::kList) continue;
    const TensorMeta out_meta = g.nodes[b].outputs[0];
    std::string name = g.nodes[b].name;
    int cur = b;
    while (!uses.is_output[cur][0]) {
      std::optional<ActivationMatch> m = MatchActivation(g, uses, {cur, 0});
      if (!m || !Implemented(m->post_op)) break;
      AbsorbActivation(g, *m, &args[kPostOpsArg], &name, &cur);
    }
    if (cur == b) continue;
    BecomeFused(g, cur, "kiln.batch_norm_nhwc", g.nodes[b].op_index, std::move(args),
                std::move(name), out_meta);
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
