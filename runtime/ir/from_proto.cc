#include "runtime/ir/from_proto.h"

#include "absl/strings/str_cat.h"
#include "runtime/ops/registry.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

absl::Status NodeError(int index, const kiln::v1::Node& node,
                       const std::string& msg,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  std::string target =
      node.has_call() ? absl::StrCat(" (", node.call().target(), ")") : "";
  return absl::Status(code, absl::StrCat("node ", index, " '", node.name(), "'",
                                         target, ": ", msg));
}

// Prefixes `status` with the node while keeping its code.
absl::Status NodeError(int index, const kiln::v1::Node& node,
                       const absl::Status& status) {
  return NodeError(index, node, std::string(status.message()), status.code());
}

}  // namespace

absl::StatusOr<Arg> ArgFromProto(const kiln::v1::Argument& proto, int self,
                                 int depth) {
  if (depth > kMaxArgDepth) {
    return absl::InvalidArgumentError("argument nesting too deep");
  }
  Arg arg;
  switch (proto.value_case()) {
    case kiln::v1::Argument::kNode:
      if (proto.node().node() < 0 || proto.node().node() >= self) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reference to node ", proto.node().node(),
            " which is not an earlier node"));
      }
      if (proto.node().output() < 0) {
        return absl::InvalidArgumentError("negative output index");
      }
      arg.kind = Arg::Kind::kTensor;
      arg.tensor = {proto.node().node(), proto.node().output()};
      break;
    case kiln::v1::Argument::kIntValue:
      arg.kind = Arg::Kind::kInt;
      arg.i = proto.int_value();
      break;
    case kiln::v1::Argument::kFloatValue:
      arg.kind = Arg::Kind::kFloat;
      arg.f = proto.float_value();
      break;
    case kiln::v1::Argument::kBoolValue:
      arg.kind = Arg::Kind::kBool;
      arg.b = proto.bool_value();
      break;
    case kiln::v1::Argument::kStrValue:
      arg.kind = Arg::Kind::kString;
      arg.s = proto.str_value();
      break;
    case kiln::v1::Argument::kNone:
      arg.kind = Arg::Kind::kNone;
      break;
    case kiln::v1::Argument::kList:
      arg.kind = Arg::Kind::kList;
      arg.list.reserve(proto.list().items_size());
      for (const auto& item : proto.list().items()) {
        KILN_ASSIGN_OR_RETURN(Arg a, ArgFromProto(item, self, depth + 1));
        arg.list.push_back(std::move(a));
      }
      break;
    case kiln::v1::Argument::kDtype:
      if (!IsValidDType(proto.dtype())) {
        return absl::InvalidArgumentError("unknown dtype literal");
      }
      arg.kind = Arg::Kind::kDType;
      arg.i = proto.dtype();
      break;
    case kiln::v1::Argument::kDevice:
      arg.kind = Arg::Kind::kDevice;
      arg.s = proto.device();
      break;
    case kiln::v1::Argument::kMemoryFormat:
      arg.kind = Arg::Kind::kMemoryFormat;
      arg.i = proto.memory_format();
      break;
    case kiln::v1::Argument::VALUE_NOT_SET:
      return absl::InvalidArgumentError("argument with no value");
  }
  return arg;
}

absl::StatusOr<TensorMeta> MetaFromProto(const kiln::v1::TensorMeta& proto) {
  if (!IsValidDType(proto.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(proto.dtype())));
  }
  if (proto.shape_size() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", proto.shape_size(), " exceeds the limit of ", kMaxRank));
  }
  TensorMeta meta;
  meta.dtype = static_cast<DType>(proto.dtype());
  meta.shape.assign(proto.shape().begin(), proto.shape().end());
  KILN_RETURN_IF_ERROR(ValidateMeta(meta));
  // A tensor with no elements has no layout, whatever strides it reports.
  if (proto.strides_size() != 0 && meta.NumElements() != 0) {
    if (proto.strides_size() != proto.shape_size()) {
      return absl::InvalidArgumentError("strides and shape differ in rank");
    }
    std::vector<int64_t> expected = ContiguousStrides(meta.shape);
    for (int i = 0; i < proto.strides_size(); ++i) {
      // Strides of size-1 dimensions do not affect the layout.
      if (meta.shape[i] > 1 && proto.strides(i) != expected[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", meta.ToString(),
            " is not contiguous; the client must send dense tensors"));
      }
    }
  }
  return meta;
}

void MetaToProto(const TensorMeta& meta, kiln::v1::TensorMeta* proto) {
  proto->set_dtype(static_cast<kiln::v1::DType>(meta.dtype));
  proto->clear_shape();
  proto->clear_strides();
  for (int64_t d : meta.shape) proto->add_shape(d);
  for (int64_t s : ContiguousStrides(meta.shape)) proto->add_strides(s);
}

absl::StatusOr<Graph> GraphFromProto(const kiln::v1::Graph& proto) {
  if (proto.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph has ", proto.nodes_size(), " nodes; the limit is ",
        kMaxGraphNodes));
  }
  Graph graph;
  graph.nodes.reserve(proto.nodes_size());
  for (int i = 0; i < proto.nodes_size(); ++i) {
    const kiln::v1::Node& pn = proto.nodes(i);
    Node node;
    node.name = pn.name().empty() ? absl::StrCat("#", i) : pn.name();
    switch (pn.kind_case()) {
      case kiln::v1::Node::kPlaceholder: {
        node.kind = Node::Kind::kInput;
        node.input_index = graph.num_inputs++;
        auto meta = MetaFromProto(pn.placeholder().meta());
        if (!meta.ok()) return NodeError(i, pn, meta.status());
        node.outputs.push_back(*std::move(meta));
        break;
      }
      case kiln::v1::Node::kConstant: {
        node.kind = Node::Kind::kConstant;
        node.constant_hash = pn.constant().hash();
        if (node.constant_hash.size() != 64 ||
            node.constant_hash.find_first_not_of("0123456789abcdef") !=
                std::string::npos) {
          return NodeError(i, pn, "constant hash must be 64 lowercase hex digits");
        }
        auto meta = MetaFromProto(pn.constant().meta());
        if (!meta.ok()) return NodeError(i, pn, meta.status());
        node.outputs.push_back(*std::move(meta));
        break;
      }
      case kiln::v1::Node::kCall: {
        node.kind = Node::Kind::kOp;
        node.target = pn.call().target();
        node.op_index = FindOp(node.target);
        if (node.op_index < 0 || AllOps()[node.op_index].internal) {
          return NodeError(i, pn, absl::StrCat("unknown op '", node.target,
                                               "' (not in the capabilities list)"));
        }
        for (const auto& a : pn.call().args()) {
          auto arg = ArgFromProto(a, i, 0);
          if (!arg.ok()) return NodeError(i, pn, arg.status());
          node.args.push_back(*std::move(arg));
        }
        for (const auto& kw : pn.call().kwargs()) {
          auto arg = ArgFromProto(kw.value(), i, 0);
          if (!arg.ok()) return NodeError(i, pn, arg.status());
          node.kwargs.push_back({kw.name(), *std::move(arg)});
        }
        break;
      }
      case kiln::v1::Node::kSize:
        return NodeError(i, pn, "symbolic size in a graph compiled as static "
                                "(dynamic-shape graphs are specialized first)");
      case kiln::v1::Node::KIND_NOT_SET:
        return NodeError(i, pn, "node has no kind");
    }
    graph.nodes.push_back(std::move(node));
  }
  if (proto.outputs_size() == 0) {
    return absl::InvalidArgumentError("graph has no outputs");
  }
  for (const auto& out : proto.outputs()) {
    if (out.node() < 0 || out.node() >= proto.nodes_size() || out.output() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph output refers to node ", out.node(), " output ", out.output(),
          ", which does not exist"));
    }
    graph.outputs.push_back({out.node(), out.output()});
  }
  for (const auto& pair : proto.outputs_over_inputs()) {
    graph.outputs_over_inputs.push_back({pair.output(), pair.input()});
  }
  KILN_RETURN_IF_ERROR(CheckOutputsOverInputs(graph, "graph"));
  return graph;
}

}  // namespace kiln::runtime
