// Ops that compute the same value run once: a node whose target, arguments
// (the same values, by node and output) and output metas equal an earlier
// live node's is replaced by it. Functionalized graphs repeat work this
// way: Res2Net's `torch.split(out, width, 1)`, read in a loop, reaches the
// compiler as one split_with_sizes per chunk read, each writing every
// chunk (8 copies of the block's activations instead of 1).
//
// Every kernel is a function of its inputs (ops/op_traits.h); an op with
// side effects, or one that overwrites an input, is never merged. Nodes
// are visited in order, so a node's inputs are already replaced by their
// earliest equal when the node is keyed, and chains of repeats collapse in
// one pass.
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// Tensors by the value they name; everything else exactly (0.1 and the
// next double differ).
void AppendArg(const Arg& arg, std::string* out) {
  AppendArgKey(arg, out, [](ValueRef ref, std::string* key) {
    absl::StrAppend(key, "%", ref.node, ".", ref.output);
    return true;
  });
}

// What the node computes, as a string equal for equal computations.
std::string Key(const Node& node) {
  std::string key = absl::StrCat(node.target, "(");
  for (const Arg& arg : node.args) AppendArg(arg, &key);
  for (const NamedArg& kw : node.kwargs) {
    absl::StrAppend(&key, kw.name, "=");
    AppendArg(kw.value, &key);
  }
  absl::StrAppend(&key, ")");
  for (const TensorMeta& meta : node.outputs) absl::StrAppend(&key, meta.ToString(), ";");
  return key;
}

}  // namespace

absl::Status EliminateCommonSubexpressions(PassContext& ctx) {
  Graph& g = ctx.graph;
  absl::flat_hash_map<std::string, int> first;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    Node& node = g.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    const OpDef* op = OpOf(node);
    if (op == nullptr || op->traits.Has(kSideEffects) || op->traits.overwrites >= 0) continue;
    auto [it, inserted] = first.try_emplace(Key(node), i);
    if (inserted) continue;
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      ReplaceAllUses(g, {i, o}, {it->second, o});
    }
    g.nodes[i].dead = true;
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
