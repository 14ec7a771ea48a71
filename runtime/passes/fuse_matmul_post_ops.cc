// Fuses activations (single nodes or decomposed, see
// activation_patterns.h) into the matmul before them, producing kiln.addmm
// (self?, mat1, mat2, post_ops). Transformer and MLP graphs often put a
// view between the two (addmm -> view -> gelu); an elementwise op commutes
// with a view, so the activation moves into the matmul and the view stays.
#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/activation_patterns.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

bool UnitScales(const Node& addmm) {
  for (const NamedArg& kw : addmm.kwargs) {
    if (kw.name != "alpha" && kw.name != "beta") return false;
    const Arg& v = kw.value;
    if (!((v.kind == Arg::Kind::kInt && v.i == 1) || (v.kind == Arg::Kind::kFloat && v.f == 1.0))) {
      return false;
    }
  }
  return addmm.args.size() == 3;
}

// The node as kiln.addmm args, or false when it is not a fusable matmul.
bool ToFusedArgs(const Graph& g, const Node& node, std::vector<Arg>* out) {
  std::vector<Arg>& a = *out;
  if (node.target == "kiln.addmm") {
    a = node.args;
  } else if (node.target == "aten.addmm.default" && UnitScales(node)) {
    a.assign(addmm_arg::kPostOps.pos + 1, NoneArg());
    a[addmm_arg::kSelf.pos] = node.args[0];
    a[addmm_arg::kMat1.pos] = node.args[1];
    a[addmm_arg::kMat2.pos] = node.args[2];
    a[addmm_arg::kPostOps.pos] = ListArg({});
  } else if (node.target == "aten.mm.default" && node.args.size() == 2 && node.kwargs.empty()) {
    a.assign(addmm_arg::kPostOps.pos + 1, NoneArg());
    a[addmm_arg::kMat1.pos] = node.args[0];
    a[addmm_arg::kMat2.pos] = node.args[1];
    a[addmm_arg::kPostOps.pos] = ListArg({});
  } else {
    return false;
  }
  // K == 0 runs without oneDNN, where post-ops would be skipped.
  const Arg& mat1 = a[addmm_arg::kMat1.pos];
  return mat1.kind == Arg::Kind::kTensor && g.MetaOf(mat1.tensor).rank() == 2 &&
         g.MetaOf(mat1.tensor).shape[1] > 0;
}

}  // namespace

absl::Status FuseMatmulPostOps(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.addmm");
  Uses uses = ComputeUses(g);
  for (int m = 0; m < static_cast<int>(g.nodes.size()); ++m) {
    std::vector<Arg> args;
    if (g.nodes[m].dead || g.nodes[m].kind != Node::Kind::kOp ||
        !ToFusedArgs(g, g.nodes[m], &args)) {
      continue;
    }
    std::string name = g.nodes[m].name;
    bool changed = false;
    // `tail` is the value the next activation must consume: the matmul's
    // output or a view of it.
    ValueRef tail{m, 0};
    while (!uses.is_output[tail.node][tail.output]) {
      if (std::optional<ActivationMatch> p = MatchDecomposedActivation(g, uses, tail)) {
        args[addmm_arg::kPostOps.pos].list.push_back(StringArg(p->post_op));
        for (int n : p->nodes) {
          name = absl::StrCat(name, "+", g.nodes[n].name);
          g.nodes[n].dead = true;
        }
        ReplaceAllUses(g, {p->last, 0}, tail);
        uses = ComputeUses(g);
        changed = true;
        continue;
      }
      if (uses.Count(tail) != 1) break;
      const int u = uses.users[tail.node][tail.output][0];
      const Node& user = g.nodes[u];
      if (user.dead) break;
      if (HasTrait(user, kReshape) && tail.node == m && user.args[0].kind == Arg::Kind::kTensor &&
          user.args[0].tensor == tail) {
        tail = {u, 0};  // look through one view
        continue;
      }
      std::string act = ActivationPostOp(user);
      if (act.empty() || user.args[0].kind != Arg::Kind::kTensor ||
          !(user.args[0].tensor == tail)) {
        break;
      }
      args[addmm_arg::kPostOps.pos].list.push_back(StringArg(act));
      name = absl::StrCat(name, "+", user.name);
      g.nodes[u].dead = true;
      ReplaceAllUses(g, {u, 0}, tail);
      uses = ComputeUses(g);
      changed = true;
    }
    if (!changed) continue;
    Node& fused = g.nodes[m];
    fused.target = "kiln.addmm";
    fused.op_index = fused_index;
    fused.args = std::move(args);
    fused.kwargs.clear();
    fused.name = name;
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
