#include "runtime/ir/specialize.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ir/tensor_meta.h"

namespace kiln::runtime {
namespace {

absl::Status NodeError(int index, const kiln::v1::Node& node, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat("node ", index, " '", node.name(), "': ", msg));
}

// Checks one argument of node `self`: references point to earlier nodes;
// `is_size[i]` says node i is a SymbolicSize.
absl::Status CheckArg(const kiln::v1::Argument& arg, int self, const std::vector<bool>& is_size,
                      int depth) {
  if (depth > kMaxArgDepth) return absl::InvalidArgumentError("argument nesting too deep");
  if (arg.has_node()) {
    const int ref = arg.node().node();
    if (ref < 0 || ref >= self || arg.node().output() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("reference to node ", ref, " which is not an earlier node"));
    }
    if (is_size[ref] && arg.node().output() != 0) {
      return absl::InvalidArgumentError(absl::StrCat("symbolic size ", ref, " has one output"));
    }
  } else if (arg.has_list()) {
    for (const auto& item : arg.list().items()) {
      absl::Status s = CheckArg(item, self, is_size, depth + 1);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// The argument with sizes replaced by their values and node indices moved
// down past the dropped SymbolicSize nodes.
void Substitute(kiln::v1::Argument* arg, const std::vector<int>& size_slot,
                const std::vector<int>& new_index,
                const google::protobuf::RepeatedField<int64_t>& sizes) {
  if (arg->has_node()) {
    const int ref = arg->node().node();
    if (size_slot[ref] >= 0) {
      arg->set_int_value(sizes[size_slot[ref]]);
    } else {
      arg->mutable_node()->set_node(new_index[ref]);
    }
  } else if (arg->has_list()) {
    for (auto& item : *arg->mutable_list()->mutable_items()) {
      Substitute(&item, size_slot, new_index, sizes);
    }
  }
}

}  // namespace

bool IsDynamic(const kiln::v1::Graph& graph) {
  for (const auto& node : graph.nodes()) {
    if (node.has_size()) return true;
    if (node.has_placeholder()) {
      for (int64_t d : node.placeholder().meta().shape()) {
        if (d < 0) return true;
      }
    }
  }
  return false;
}

absl::Status ValidateTemplate(const kiln::v1::Graph& graph) {
  if (graph.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(absl::StrCat("graph has ", graph.nodes_size(),
                                                   " nodes; the limit is ",
                                                   kMaxGraphNodes));
  }
  std::vector<bool> is_size(graph.nodes_size(), false);
  for (int i = 0; i < graph.nodes_size(); ++i) {
    const kiln::v1::Node& node = graph.nodes(i);
    if (node.has_size()) {
      is_size[i] = true;
    } else if (node.has_placeholder()) {
      const auto& meta = node.placeholder().meta();
      if (meta.shape_size() > kMaxRank) {
        return NodeError(i, node, absl::StrCat("rank ", meta.shape_size(), " exceeds the limit of ",
                                               kMaxRank));
      }
      if (meta.dtype() == kiln::v1::DTYPE_UNSPECIFIED || !kiln::v1::DType_IsValid(meta.dtype())) {
        return NodeError(i, node, "placeholder has no valid dtype");
      }
      for (int64_t d : meta.shape()) {
        if (d < -1) return NodeError(i, node, absl::StrCat("dimension ", d, " (-1 is symbolic)"));
      }
    } else if (node.has_call()) {
      for (const auto& a : node.call().args()) {
        absl::Status s = CheckArg(a, i, is_size, 0);
        if (!s.ok()) return NodeError(i, node, std::string(s.message()));
      }
      for (const auto& kw : node.call().kwargs()) {
        absl::Status s = CheckArg(kw.value(), i, is_size, 0);
        if (!s.ok()) return NodeError(i, node, std::string(s.message()));
      }
    } else if (!node.has_constant()) {
      return NodeError(i, node, "node has no kind");
    }
  }
  if (graph.outputs_size() == 0) return absl::InvalidArgumentError("graph has no outputs");
  for (const auto& out : graph.outputs()) {
    if (out.node() < 0 || out.node() >= graph.nodes_size() || out.output() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("graph output refers to node ", out.node(),
                                                     ", which does not exist"));
    }
    if (is_size[out.node()]) {
      return absl::InvalidArgumentError("a graph output is a symbolic size, not a tensor");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<kiln::v1::Graph> SpecializeGraph(
    const kiln::v1::Graph& tmpl,
    const google::protobuf::RepeatedPtrField<kiln::v1::TensorMeta>& inputs,
    const google::protobuf::RepeatedField<int64_t>& sizes) {
  const int n = tmpl.nodes_size();
  std::vector<int> size_slot(n, -1), new_index(n, -1);
  int num_inputs = 0, num_sizes = 0, kept = 0;
  for (int i = 0; i < n; ++i) {
    const auto& node = tmpl.nodes(i);
    if (node.has_size()) {
      size_slot[i] = num_sizes++;
    } else {
      num_inputs += node.has_placeholder() ? 1 : 0;
      new_index[i] = kept++;
    }
  }
  if (inputs.size() != num_inputs || sizes.size() != num_sizes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the graph has ", num_inputs, " inputs and ", num_sizes, " symbolic sizes; got ",
        inputs.size(), " input metas and ", sizes.size(), " sizes"));
  }
  kiln::v1::Graph out;
  out.mutable_nodes()->Reserve(kept);
  int input = 0;
  for (int i = 0; i < n; ++i) {
    const auto& node = tmpl.nodes(i);
    if (node.has_size()) continue;
    kiln::v1::Node* copy = out.add_nodes();
    *copy = node;
    if (node.has_placeholder()) {
      const auto& want = node.placeholder().meta();
      const auto& got = inputs[input++];
      if (got.dtype() != want.dtype() || got.shape_size() != want.shape_size()) {
        return NodeError(i, node, absl::StrCat("input ", input - 1, " is ",
                                               kiln::v1::DType_Name(got.dtype()), " of rank ",
                                               got.shape_size(), "; the graph takes ",
                                               kiln::v1::DType_Name(want.dtype()), " of rank ",
                                               want.shape_size()));
      }
      auto* meta = copy->mutable_placeholder()->mutable_meta();
      meta->clear_strides();
      for (int d = 0; d < want.shape_size(); ++d) {
        if (want.shape(d) >= 0 && got.shape(d) != want.shape(d)) {
          return NodeError(i, node, absl::StrCat("input ", input - 1, " dimension ", d, " is ",
                                                 got.shape(d), "; the graph fixes it at ",
                                                 want.shape(d)));
        }
        meta->set_shape(d, got.shape(d));
      }
    } else if (node.has_call()) {
      auto* call = copy->mutable_call();
      for (auto& a : *call->mutable_args()) Substitute(&a, size_slot, new_index, sizes);
      for (auto& kw : *call->mutable_kwargs()) {
        Substitute(kw.mutable_value(), size_slot, new_index, sizes);
      }
    }
  }
  for (const auto& ref : tmpl.outputs()) {
    auto* o = out.add_outputs();
    o->set_node(new_index[ref.node()]);
    o->set_output(ref.output());
  }
  *out.mutable_outputs_over_inputs() = tmpl.outputs_over_inputs();
  return out;
}

}  // namespace kiln::runtime
