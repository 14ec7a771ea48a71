#include "runtime/ir/graph.h"

namespace kiln::runtime {

void CollectTensorRefs(const Arg& arg, std::vector<ValueRef>* out) {
  if (arg.kind == Arg::Kind::kTensor) {
    out->push_back(arg.tensor);
  } else if (arg.kind == Arg::Kind::kList) {
    for (const Arg& item : arg.list) CollectTensorRefs(item, out);
  }
}

std::vector<ValueRef> TensorInputsOf(const Node& node) {
  std::vector<ValueRef> refs;
  for (const Arg& a : node.args) CollectTensorRefs(a, &refs);
  for (const NamedArg& a : node.kwargs) CollectTensorRefs(a.value, &refs);
  return refs;
}

}  // namespace kiln::runtime
