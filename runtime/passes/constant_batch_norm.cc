#include "runtime/passes/constant_batch_norm.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {

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

}  // namespace

const float* ConstantF32Arg(const PassContext& ctx, const Node& node, int pos, int64_t numel) {
  if (pos >= static_cast<int>(node.args.size())) return nullptr;
  const Arg& a = node.args[pos];
  if (a.kind != Arg::Kind::kTensor || a.tensor.output != 0) return nullptr;
  const TensorMeta& meta = ctx.graph.MetaOf(a.tensor);
  if (meta.dtype != DType::kF32 || meta.NumElements() != numel) return nullptr;
  return static_cast<const float*>(ctx.constant_data[a.tensor.node]);
}

std::optional<ConstantBatchNorm> MatchConstantBatchNorm(const PassContext& ctx, const Uses& uses,
                                                        int b) {
  const Node& bn = ctx.graph.nodes[b];
  if (bn.dead || bn.kind != Node::Kind::kOp || !bn.kwargs.empty()) return std::nullopt;
  int eps_pos;
  if (bn.target == "aten.native_batch_norm.default") {
    if (bn.args.size() != 8 || bn.args[5].kind != Arg::Kind::kBool || bn.args[5].b) {
      return std::nullopt;
    }
    eps_pos = 7;
  } else if (bn.target == "aten._native_batch_norm_legit_no_training.default") {
    if (bn.args.size() != 7) return std::nullopt;
    eps_pos = 6;
  } else {
    return std::nullopt;
  }
  if (bn.args[0].kind != Arg::Kind::kTensor || bn.outputs.size() != 3 ||
      uses.Count({b, 1}) != 0 || uses.Count({b, 2}) != 0) {
    return std::nullopt;
  }
  ConstantBatchNorm m;
  m.input = bn.args[0].tensor;
  const TensorMeta& in = ctx.graph.MetaOf(m.input);
  if (in.rank() < 2) return std::nullopt;
  m.channels = in.shape[1];
  m.gamma = ArgIsNone(bn, 1) ? nullptr : ConstantF32Arg(ctx, bn, 1, m.channels);
  m.beta = ArgIsNone(bn, 2) ? nullptr : ConstantF32Arg(ctx, bn, 2, m.channels);
  m.mean = ConstantF32Arg(ctx, bn, 3, m.channels);
  m.var = ConstantF32Arg(ctx, bn, 4, m.channels);
  if (m.mean == nullptr || m.var == nullptr || !LiteralFloat(bn, eps_pos, &m.eps) ||
      (!ArgIsNone(bn, 1) && m.gamma == nullptr) || (!ArgIsNone(bn, 2) && m.beta == nullptr)) {
    return std::nullopt;
  }
  return m;
}

std::string DerivationRecipe(const PassContext& ctx, const std::string& kind, double eps,
                             std::initializer_list<std::pair<const Node*, int>> tensors) {
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof eps_bits);
  std::string recipe = absl::StrCat(kind, "|", eps_bits);
  for (const auto& [node, pos] : tensors) {
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

}  // namespace kiln::runtime
