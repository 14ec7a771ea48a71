#include "runtime/ir/graph.h"

#include <cstring>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kiln::runtime {

int InputNode(const Graph& graph, int index) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    if (node.kind == Node::Kind::kInput && node.input_index == index) return static_cast<int>(i);
  }
  return -1;
}

absl::Status CheckOutputsOverInputs(const Graph& graph, const std::string& what) {
  absl::flat_hash_set<int> outputs, inputs;
  for (const OutputOverInput& pair : graph.outputs_over_inputs) {
    auto fail = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": output ", pair.output,
                                                     " over input ", pair.input, ": ", why));
    };
    if (pair.output < 0 || static_cast<size_t>(pair.output) >= graph.outputs.size()) {
      return fail(absl::StrCat("the graph has ", graph.outputs.size(), " outputs"));
    }
    const int input = InputNode(graph, pair.input);
    if (input < 0) return fail(absl::StrCat("the graph has ", graph.num_inputs, " inputs"));
    if (!outputs.insert(pair.output).second || !inputs.insert(pair.input).second) {
      return fail("an output or input named twice");
    }
    // Ops' metas are inferred later: when they are known, they must match.
    const ValueRef out = graph.outputs[pair.output];
    if (out.node < 0 || static_cast<size_t>(out.node) >= graph.nodes.size() ||
        out.output < 0 ||
        static_cast<size_t>(out.output) >= graph.nodes[out.node].outputs.size()) {
      continue;
    }
    const TensorMeta& have = graph.MetaOf(out);
    const TensorMeta& want = graph.nodes[input].outputs[0];
    if (have.dtype != want.dtype || have.shape != want.shape) {
      return fail(absl::StrCat("the output is ", have.ToString(), ", the input ",
                               want.ToString()));
    }
  }
  return absl::OkStatus();
}

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

bool AppendArgKey(const Arg& arg, std::string* out,
                  absl::FunctionRef<bool(ValueRef, std::string*)> tensor) {
  switch (arg.kind) {
    case Arg::Kind::kTensor:
      if (!tensor(arg.tensor, out)) return false;
      break;
    case Arg::Kind::kList:
      absl::StrAppend(out, "[");
      for (const Arg& item : arg.list) {
        if (!AppendArgKey(item, out, tensor)) return false;
      }
      absl::StrAppend(out, "]");
      break;
    case Arg::Kind::kFloat: {
      uint64_t bits;
      std::memcpy(&bits, &arg.f, sizeof bits);  // exact, unlike a decimal print
      absl::StrAppend(out, "f", bits);
      break;
    }
    default:
      absl::StrAppend(out, "k", static_cast<int>(arg.kind), ":", arg.i, ":", arg.b ? 1 : 0, ":",
                      arg.s.size(), ":", arg.s);
  }
  absl::StrAppend(out, ",");
  return true;
}

}  // namespace kiln::runtime
