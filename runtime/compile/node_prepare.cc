#include "runtime/compile/node_prepare.h"

#include "absl/strings/str_cat.h"
#include "runtime/ops/registry.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

absl::Status CheckInputs(const Graph& g, const Node& node, const OpDef& def) {
  for (const ValueRef& ref : TensorInputsOf(node)) {
    const Node& src = g.nodes[ref.node];
    if (ref.output >= static_cast<int>(src.outputs.size())) {
      return NodeError(node, absl::StrCat("refers to output ", ref.output, " of node '", src.name,
                                          "', which has ", src.outputs.size(), " outputs"));
    }
    DType dt = g.MetaOf(ref).dtype;
    if ((def.dtypes & DTypeBit(dt)) == 0) {
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "' (", node.target,
                                                   "): dtype ", DTypeName(dt),
                                                   " is not supported by this op"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NodeError(const Node& node, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node.name, "' (", node.target, "): ", msg));
}

absl::StatusOr<PreparedOp> PrepareNode(const Graph& g, const Node& node,
                                       const std::vector<const void*>& constant_data,
                                       bool shape_only) {
  const OpDef& def = AllOps()[node.op_index];
  KILN_RETURN_IF_ERROR(CheckInputs(g, node, def));
  NodeArgs args(g, node, constant_data, shape_only, g.options);
  KILN_ASSIGN_OR_RETURN(PreparedOp prepared, def.prepare(args));
  for (const TensorMeta& meta : prepared.outputs) {
    absl::Status s = ValidateMeta(meta);
    if (!s.ok()) return NodeError(node, s.message());
  }
  if (!shape_only && prepared.kernel == nullptr) {
    return absl::InternalError(absl::StrCat("node '", node.name, "': prepare built no kernel"));
  }
  return prepared;
}

}  // namespace kiln::runtime
