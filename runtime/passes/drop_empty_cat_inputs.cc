// Concatenation inputs with no elements are dropped, and a concatenation
// left with one input becomes an alias of it (no kernel, no copy).
//
// transformers' DynamicCache starts every layer's keys and values as empty
// tensors and concatenates the past onto them:
//   cat([empty, past_key], -2)  ->  past_key
// At a Llama decode step of batch 8 these were eight 2 MiB copies per call
// before the new token's concatenation copied the same bytes once more.
//
// ATen's cat skips inputs with no elements (and 1-D [0] ones whatever their
// rank), but their dtypes still take part in the result's type promotion:
// an input is dropped only when every remaining one has the output's
// dtype. Runs after constant folding, where such empties become constants.
#include <vector>

#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {

absl::Status DropEmptyCatInputs(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int alias_index = FindOp("aten.alias.default");
  for (Node& node : g.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp || node.target != "aten.cat.default" ||
        node.args.empty() || node.args[0].kind != Arg::Kind::kList || node.outputs.size() != 1 ||
        node.outputs[0].NumElements() == 0) {
      continue;
    }
    const TensorMeta& out = node.outputs[0];
    std::vector<Arg> kept;
    bool droppable = true;  // a plain list of tensors, the kept ones of out's dtype
    for (const Arg& a : node.args[0].list) {
      if (a.kind != Arg::Kind::kTensor) {
        droppable = false;
        break;
      }
      const TensorMeta& m = g.MetaOf(a.tensor);
      if (m.NumElements() == 0) continue;
      droppable = droppable && m.dtype == out.dtype;
      kept.push_back(a);
    }
    if (!droppable || kept.empty() || kept.size() == node.args[0].list.size()) continue;
    if (kept.size() == 1 && g.MetaOf(kept[0].tensor).shape == out.shape &&
        (AllOps()[alias_index].dtypes & DTypeBit(out.dtype)) != 0) {
      node.target = "aten.alias.default";
      node.op_index = alias_index;
      node.args = {kept[0]};
      node.kwargs.clear();
    } else {
      node.args[0].list = std::move(kept);
    }
  }
  EliminateDeadNodes(g);
  return absl::OkStatus();
}

}  // namespace kiln::runtime
