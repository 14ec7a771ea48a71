// Matrix products whose right operand is the transpose of a constant,
//   mm(x, permute(W, [1, 0]))  and  addmm(self, x, permute(W, [1, 0]))
// (how ATen's decomposition of linear spells x @ W^T), become
//   kiln.addmm(self?, x, W, [], mat2_transposed=True)
// reading W [N, K] as it is: the kernel packs it straight from that layout
// at prepare time. Without this the transpose is either folded, which
// holds a transposed copy of every weight beside the packed one during the
// compile, or (over the folding cap: the 9216x4096 and 25088x4096
// classifier weights of alexnet and vgg16) run as a copy of the whole
// weight on every call.
//
// Runs before constant folding. A transpose with other users stays for
// them.
#include <optional>
#include <vector>

#include "runtime/ir/arg_builders.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// The [N, K] constant whose [1, 0] permutation `v` is, if it is one.
std::optional<ValueRef> TransposedConstant(const PassContext& ctx, const Arg& v) {
  if (v.kind != Arg::Kind::kTensor) return std::nullopt;
  const Node& p = ctx.graph.nodes[v.tensor.node];
  if (p.dead || p.kind != Node::Kind::kOp || p.target != "aten.permute.default" ||
      p.args.size() != 2 || !p.kwargs.empty() || p.args[0].kind != Arg::Kind::kTensor) {
    return std::nullopt;
  }
  const Arg& dims = p.args[1];
  if (dims.kind != Arg::Kind::kList || dims.list.size() != 2 ||
      dims.list[0].kind != Arg::Kind::kInt || dims.list[1].kind != Arg::Kind::kInt) {
    return std::nullopt;
  }
  const int64_t d0 = dims.list[0].i, d1 = dims.list[1].i;
  if (!((d0 == 1 || d0 == -1) && (d1 == 0 || d1 == -2))) return std::nullopt;
  const ValueRef w = p.args[0].tensor;
  const Node& source = ctx.graph.nodes[w.node];
  if (source.kind != Node::Kind::kConstant || ctx.constant_data[w.node] == nullptr ||
      ctx.graph.MetaOf(w).rank() != 2 || ctx.graph.MetaOf(w).dtype != DType::kF32) {
    return std::nullopt;
  }
  return w;
}

bool UnitScales(const Node& addmm) {
  for (const NamedArg& kw : addmm.kwargs) {
    const Arg& v = kw.value;
    if (kw.name != "alpha" && kw.name != "beta") return false;
    if (!((v.kind == Arg::Kind::kInt && v.i == 1) || (v.kind == Arg::Kind::kFloat && v.f == 1.0))) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::Status AbsorbWeightTranspose(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.addmm");
  for (Node& node : g.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    Arg self = NoneArg();
    const Arg* mat1 = nullptr;
    const Arg* mat2 = nullptr;
    if (node.target == "aten.mm.default" && node.args.size() == 2 && node.kwargs.empty()) {
      mat1 = &node.args[0];
      mat2 = &node.args[1];
    } else if (node.target == "aten.addmm.default" && node.args.size() == 3 &&
               UnitScales(node)) {
      self = node.args[0];
      mat1 = &node.args[1];
      mat2 = &node.args[2];
    } else {
      continue;
    }
    const std::optional<ValueRef> w = TransposedConstant(ctx, *mat2);
    if (!w) continue;
    std::vector<Arg> args(addmm_arg::kMat2Transposed.pos + 1);
    args[addmm_arg::kSelf.pos] = self;
    args[addmm_arg::kMat1.pos] = *mat1;
    args[addmm_arg::kMat2.pos] = TensorArg(*w);
    args[addmm_arg::kPostOps.pos] = ListArg({});
    args[addmm_arg::kMat2Transposed.pos] = BoolArg(true);
    node.target = "kiln.addmm";
    node.op_index = fused_index;
    node.args = std::move(args);
    node.kwargs.clear();
  }
  EliminateDeadNodes(g);
  return absl::OkStatus();
}

}  // namespace kiln::runtime
