#include "runtime/ir/optimized_proto.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ops/registry.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr char kStorePrefix[] = "h:";
constexpr char kDerivedPrefix[] = "d:";

bool IsHex64(const std::string& s, size_t from) {
  return s.size() == from + 64 &&
         s.find_first_not_of("0123456789abcdef", from) == std::string::npos;
}

// "h:" or "d:" and 64 lowercase hex digits (compile/shared_constants.h).
bool IsShareKey(const std::string& key) {
  return (key.rfind(kStorePrefix, 0) == 0 || key.rfind(kDerivedPrefix, 0) == 0) &&
         IsHex64(key, 2);
}

void ArgToProto(const Arg& arg, const std::vector<int>& new_index, kiln::v1::Argument* out) {
  switch (arg.kind) {
    case Arg::Kind::kNone:
      out->mutable_none();
      break;
    case Arg::Kind::kTensor:
      out->mutable_node()->set_node(new_index[arg.tensor.node]);
      out->mutable_node()->set_output(arg.tensor.output);
      break;
    case Arg::Kind::kInt:
      out->set_int_value(arg.i);
      break;
    case Arg::Kind::kFloat:
      out->set_float_value(arg.f);
      break;
    case Arg::Kind::kBool:
      out->set_bool_value(arg.b);
      break;
    case Arg::Kind::kString:
      out->set_str_value(arg.s);
      break;
    case Arg::Kind::kList: {
      kiln::v1::ArgumentList* list = out->mutable_list();
      for (const Arg& item : arg.list) ArgToProto(item, new_index, list->add_items());
      break;
    }
    case Arg::Kind::kDType:
      out->set_dtype(static_cast<kiln::v1::DType>(arg.i));
      break;
    case Arg::Kind::kDevice:
      out->set_device(arg.s);
      break;
    case Arg::Kind::kMemoryFormat:
      out->set_memory_format(static_cast<kiln::v1::MemoryFormat>(arg.i));
      break;
  }
}

absl::Status NodeError(int index, const kiln::v1::OptimizedNode& node, const absl::Status& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimized graph node ", index, " '", node.name(), "': ", why.message()));
}

// Which part of the order a node belongs to: inputs, constants, ops.
int Rank(kiln::v1::OptimizedNode::KindCase kind) {
  switch (kind) {
    case kiln::v1::OptimizedNode::kInput:
      return 0;
    case kiln::v1::OptimizedNode::kConstant:
      return 1;
    default:
      return 2;
  }
}

}  // namespace

bool OptimizedGraphToProto(const Graph& graph, const std::vector<const void*>& constant_data,
                           int64_t max_inline_bytes, kiln::v1::OptimizedGraph* out) {
  const int n = static_cast<int>(graph.nodes.size());
  // Inputs by input index (every one, used or not: the caller passes them
  // all), then live constants, then live ops, each in graph order.
  std::vector<int> order;
  std::vector<int> inputs;
  for (int i = 0; i < n; ++i) {
    if (graph.nodes[i].kind == Node::Kind::kInput) inputs.push_back(i);
  }
  std::sort(inputs.begin(), inputs.end(), [&](int a, int b) {
    return graph.nodes[a].input_index < graph.nodes[b].input_index;
  });
  order = inputs;
  // Only the constants something live reads: the passes leave the client
  // weights they folded away in the graph, and a compile from the artifact
  // would otherwise look up (and a new daemon ask the client for) every one.
  std::vector<bool> read(n, false);
  for (const Node& node : graph.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    for (const ValueRef& ref : TensorInputsOf(node)) read[ref.node] = true;
  }
  for (const ValueRef& ref : graph.outputs) read[ref.node] = true;
  for (Node::Kind kind : {Node::Kind::kConstant, Node::Kind::kOp}) {
    for (int i = 0; i < n; ++i) {
      const Node& node = graph.nodes[i];
      if (node.dead || node.kind != kind) continue;
      if (kind == Node::Kind::kConstant && !read[i]) continue;
      order.push_back(i);
    }
  }
  std::vector<int> new_index(n, -1);
  for (size_t k = 0; k < order.size(); ++k) new_index[order[k]] = static_cast<int>(k);

  int64_t inline_bytes = 0;
  for (int i : order) {
    const Node& node = graph.nodes[i];
    kiln::v1::OptimizedNode* pn = out->add_nodes();
    pn->set_name(node.name);
    switch (node.kind) {
      case Node::Kind::kInput:
        MetaToProto(node.outputs[0], pn->mutable_input()->mutable_meta());
        break;
      case Node::Kind::kConstant: {
        kiln::v1::OptimizedConstant* c = pn->mutable_constant();
        MetaToProto(node.outputs[0], c->mutable_meta());
        const std::string key = !node.constant_hash.empty()
                                    ? absl::StrCat(kStorePrefix, node.constant_hash)
                                    : node.share_key;
        if (IsShareKey(key)) {
          c->set_share_key(key);
          break;
        }
        const int64_t size = node.outputs[0].ByteSize();
        inline_bytes += size;
        if (inline_bytes > max_inline_bytes || (size > 0 && constant_data[i] == nullptr)) {
          return false;
        }
        c->set_data(constant_data[i], static_cast<size_t>(size));
        break;
      }
      case Node::Kind::kOp: {
        for (const ValueRef& ref : TensorInputsOf(node)) {
          if (new_index[ref.node] < 0) return false;  // a live op reading a dead node
        }
        kiln::v1::Call* call = pn->mutable_call();
        call->set_target(node.target);
        for (const Arg& arg : node.args) ArgToProto(arg, new_index, call->add_args());
        for (const NamedArg& kw : node.kwargs) {
          kiln::v1::NamedArgument* named = call->add_kwargs();
          named->set_name(kw.name);
          ArgToProto(kw.value, new_index, named->mutable_value());
        }
        break;
      }
    }
  }
  for (const ValueRef& ref : graph.outputs) {
    if (new_index[ref.node] < 0) return false;
    kiln::v1::NodeRef* o = out->add_outputs();
    o->set_node(new_index[ref.node]);
    o->set_output(ref.output);
  }
  for (const OutputOverInput& pair : graph.outputs_over_inputs) {
    kiln::v1::OutputOverInput* p = out->add_outputs_over_inputs();
    p->set_output(pair.output);
    p->set_input(pair.input);
  }
  return true;
}

absl::StatusOr<DecodedOptimizedGraph> OptimizedGraphFromProto(
    const kiln::v1::OptimizedGraph& proto) {
  if (proto.nodes_size() > kMaxGraphNodes) {
    return absl::InvalidArgumentError(absl::StrCat("optimized graph has ", proto.nodes_size(),
                                                   " nodes; the limit is ", kMaxGraphNodes));
  }
  DecodedOptimizedGraph decoded;
  Graph& graph = decoded.graph;
  graph.nodes.reserve(proto.nodes_size());
  int last_rank = 0;
  for (int i = 0; i < proto.nodes_size(); ++i) {
    const kiln::v1::OptimizedNode& pn = proto.nodes(i);
    if (pn.kind_case() == kiln::v1::OptimizedNode::KIND_NOT_SET) {
      return NodeError(i, pn, absl::InvalidArgumentError("node has no kind"));
    }
    const int rank = Rank(pn.kind_case());
    if (rank < last_rank) {
      return NodeError(i, pn, absl::InvalidArgumentError(
                                  "out of order (inputs, then constants, then ops)"));
    }
    last_rank = rank;
    Node node;
    node.name = pn.name().empty() ? absl::StrCat("#", i) : pn.name();
    switch (pn.kind_case()) {
      case kiln::v1::OptimizedNode::kInput: {
        node.kind = Node::Kind::kInput;
        node.input_index = graph.num_inputs++;
        auto meta = MetaFromProto(pn.input().meta());
        if (!meta.ok()) return NodeError(i, pn, meta.status());
        node.outputs.push_back(*std::move(meta));
        break;
      }
      case kiln::v1::OptimizedNode::kConstant: {
        const kiln::v1::OptimizedConstant& c = pn.constant();
        node.kind = Node::Kind::kConstant;
        auto meta = MetaFromProto(c.meta());
        if (!meta.ok()) return NodeError(i, pn, meta.status());
        node.outputs.push_back(*std::move(meta));
        const int64_t size = node.outputs[0].ByteSize();
        if (!c.share_key().empty()) {
          if (!IsShareKey(c.share_key())) {
            return NodeError(i, pn, absl::InvalidArgumentError(
                                        absl::StrCat("malformed share key '", c.share_key(), "'")));
          }
          if (!c.data().empty()) {
            return NodeError(i, pn, absl::InvalidArgumentError(
                                        "a constant names a share key or holds bytes, not both"));
          }
          node.share_key = c.share_key();
          if (node.share_key.rfind(kStorePrefix, 0) == 0) {
            node.constant_hash = node.share_key.substr(2);
          }
        } else {
          if (static_cast<int64_t>(c.data().size()) != size) {
            return NodeError(i, pn, absl::InvalidArgumentError(absl::StrCat(
                                        "inline constant has ", c.data().size(),
                                        " bytes; its meta needs ", size)));
          }
          void* raw = std::aligned_alloc(64, static_cast<size_t>((size + 127) / 64 * 64));
          if (raw == nullptr) throw std::bad_alloc();
          if (size > 0) std::memcpy(raw, c.data().data(), static_cast<size_t>(size));
          decoded.inline_constants.emplace_back(
              i, ConstantData{std::shared_ptr<const uint8_t>(
                                  static_cast<const uint8_t*>(raw),
                                  [](const uint8_t* p) { std::free(const_cast<uint8_t*>(p)); }),
                              size});
        }
        break;
      }
      case kiln::v1::OptimizedNode::kCall: {
        node.kind = Node::Kind::kOp;
        node.target = pn.call().target();
        node.op_index = FindOp(node.target);
        if (node.op_index < 0) {
          return NodeError(i, pn, absl::InvalidArgumentError(
                                      absl::StrCat("unknown op '", node.target, "'")));
        }
        for (const auto& a : pn.call().args()) {
          auto arg = ArgFromProto(a, i);
          if (!arg.ok()) return NodeError(i, pn, arg.status());
          node.args.push_back(*std::move(arg));
        }
        for (const auto& kw : pn.call().kwargs()) {
          auto arg = ArgFromProto(kw.value(), i);
          if (!arg.ok()) return NodeError(i, pn, arg.status());
          node.kwargs.push_back({kw.name(), *std::move(arg)});
        }
        break;
      }
      case kiln::v1::OptimizedNode::KIND_NOT_SET:
        break;  // refused above
    }
    graph.nodes.push_back(std::move(node));
  }
  if (proto.outputs_size() == 0) {
    return absl::InvalidArgumentError("optimized graph has no outputs");
  }
  for (const auto& out : proto.outputs()) {
    if (out.node() < 0 || out.node() >= proto.nodes_size() || out.output() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("optimized graph output refers to node ",
                                                     out.node(), " output ", out.output(),
                                                     ", which does not exist"));
    }
    graph.outputs.push_back({out.node(), out.output()});
  }
  for (const auto& pair : proto.outputs_over_inputs()) {
    graph.outputs_over_inputs.push_back({pair.output(), pair.input()});
  }
  KILN_RETURN_IF_ERROR(CheckOutputsOverInputs(graph, "optimized graph"));
  return decoded;
}

}  // namespace kiln::runtime
