// NodeArgs: typed, checked access to a node's positional and keyword
// arguments for the ops' prepare functions.
#include "runtime/ops/op_def.h"

#include "absl/strings/str_cat.h"

namespace kiln::runtime {
namespace {

const char* KindName(Arg::Kind kind) {
  switch (kind) {
    case Arg::Kind::kNone:
      return "None";
    case Arg::Kind::kTensor:
      return "a tensor";
    case Arg::Kind::kInt:
      return "an int";
    case Arg::Kind::kFloat:
      return "a float";
    case Arg::Kind::kBool:
      return "a bool";
    case Arg::Kind::kString:
      return "a string";
    case Arg::Kind::kList:
      return "a list";
    case Arg::Kind::kDType:
      return "a dtype";
    case Arg::Kind::kDevice:
      return "a device";
    case Arg::Kind::kMemoryFormat:
      return "a memory format";
  }
  return "an unknown kind";
}

}  // namespace

NodeArgs::NodeArgs(const Graph& graph, const Node& node,
                   const std::vector<const void*>& constant_data,
                   bool shape_only, const CompileOptions& options)
    : graph_(graph),
      node_(node),
      constant_data_(constant_data),
      shape_only_(shape_only),
      options_(options) {}

const Arg* NodeArgs::Find(int pos, const char* name) const {
  const Arg* arg = nullptr;
  if (pos >= 0 && pos < static_cast<int>(node_.args.size())) {
    arg = &node_.args[pos];
  } else if (name != nullptr) {
    for (const NamedArg& kw : node_.kwargs) {
      if (kw.name == name) {
        arg = &kw.value;
        break;
      }
    }
  }
  if (arg == nullptr || arg->kind == Arg::Kind::kNone) return nullptr;
  return arg;
}

absl::Status NodeArgs::Error(const std::string& msg) const {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node_.name, "' (", node_.target, "): ", msg));
}

absl::Status NodeArgs::Unimplemented(const std::string& msg) const {
  return absl::UnimplementedError(
      absl::StrCat("node '", node_.name, "' (", node_.target, "): ", msg));
}

absl::StatusOr<std::optional<TensorMeta>> NodeArgs::OptionalTensor(
    int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) return std::optional<TensorMeta>();
  if (arg->kind != Arg::Kind::kTensor) {
    return Error(absl::StrCat(name, " must be a tensor, got ",
                              KindName(arg->kind)));
  }
  const ValueRef ref = arg->tensor;
  // The graph decoder checks references, but a bad one here must not crash.
  if (ref.node < 0 || ref.node >= static_cast<int>(graph_.nodes.size()) ||
      ref.output < 0 ||
      ref.output >= static_cast<int>(graph_.nodes[ref.node].outputs.size())) {
    return Error(absl::StrCat(name, " refers to a missing value (node ",
                              ref.node, ", output ", ref.output, ")"));
  }
  return std::optional<TensorMeta>(graph_.MetaOf(ref));
}

absl::StatusOr<std::vector<std::optional<TensorMeta>>>
NodeArgs::OptionalTensorList(int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr || arg->kind != Arg::Kind::kList) {
    return Error(absl::StrCat(name, " must be a list of tensors"));
  }
  std::vector<std::optional<TensorMeta>> metas;
  for (const Arg& item : arg->list) {
    if (item.kind == Arg::Kind::kNone) {
      metas.emplace_back();
      continue;
    }
    const ValueRef ref = item.tensor;
    if (item.kind != Arg::Kind::kTensor || ref.node < 0 ||
        ref.node >= static_cast<int>(graph_.nodes.size()) || ref.output < 0 ||
        ref.output >= static_cast<int>(graph_.nodes[ref.node].outputs.size())) {
      return Error(absl::StrCat(name, " must be a list of tensors, got an ",
                                "item that is ", KindName(item.kind),
                                " or refers to a missing value"));
    }
    metas.push_back(graph_.MetaOf(ref));
  }
  return metas;
}

absl::StatusOr<std::vector<TensorMeta>> NodeArgs::TensorList(
    int pos, const char* name) const {
  absl::StatusOr<std::vector<std::optional<TensorMeta>>> items =
      OptionalTensorList(pos, name);
  if (!items.ok()) return items.status();
  std::vector<TensorMeta> metas;
  for (const std::optional<TensorMeta>& item : *items) {
    if (!item.has_value()) {
      return Error(absl::StrCat(name, " must not contain None"));
    }
    metas.push_back(*item);
  }
  return metas;
}

absl::StatusOr<TensorMeta> NodeArgs::Tensor(int pos, const char* name) const {
  absl::StatusOr<std::optional<TensorMeta>> t = OptionalTensor(pos, name);
  if (!t.ok()) return t.status();
  if (!t->has_value()) {
    return Error(absl::StrCat("missing tensor argument ", name, " (position ",
                              pos, ")"));
  }
  return **t;
}

absl::StatusOr<int64_t> NodeArgs::Int(int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) {
    return Error(
        absl::StrCat("missing int argument ", name, " (position ", pos, ")"));
  }
  return Int(pos, name, 0);
}

absl::StatusOr<int64_t> NodeArgs::Int(int pos, const char* name,
                                      int64_t def) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) return def;
  if (arg->kind != Arg::Kind::kInt) {
    return Error(
        absl::StrCat(name, " must be an int, got ", KindName(arg->kind)));
  }
  return arg->i;
}

absl::StatusOr<double> NodeArgs::Float(int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) {
    return Error(
        absl::StrCat("missing float argument ", name, " (position ", pos, ")"));
  }
  return Float(pos, name, 0.0);
}

absl::StatusOr<double> NodeArgs::Float(int pos, const char* name,
                                       double def) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) return def;
  // Python callers write `alpha=1` for a float parameter.
  if (arg->kind == Arg::Kind::kInt) return static_cast<double>(arg->i);
  if (arg->kind != Arg::Kind::kFloat) {
    return Error(
        absl::StrCat(name, " must be a float, got ", KindName(arg->kind)));
  }
  return arg->f;
}

absl::StatusOr<bool> NodeArgs::Bool(int pos, const char* name,
                                    bool def) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) return def;
  if (arg->kind != Arg::Kind::kBool) {
    return Error(
        absl::StrCat(name, " must be a bool, got ", KindName(arg->kind)));
  }
  return arg->b;
}

absl::StatusOr<std::optional<std::vector<int64_t>>> NodeArgs::OptionalIntList(
    int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr) return std::optional<std::vector<int64_t>>();
  // ATen's `int[2]` accepts a single int, meaning that int repeated; callers
  // expand a one-element list to the length they need.
  if (arg->kind == Arg::Kind::kInt) {
    return std::optional<std::vector<int64_t>>(std::vector<int64_t>{arg->i});
  }
  if (arg->kind != Arg::Kind::kList) {
    return Error(absl::StrCat(name, " must be a list of ints, got ",
                              KindName(arg->kind)));
  }
  std::vector<int64_t> out;
  out.reserve(arg->list.size());
  for (const Arg& item : arg->list) {
    if (item.kind != Arg::Kind::kInt) {
      return Error(absl::StrCat(name, " must be a list of ints, got an item ",
                                "that is ", KindName(item.kind)));
    }
    out.push_back(item.i);
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

absl::StatusOr<std::vector<int64_t>> NodeArgs::IntList(int pos,
                                                       const char* name) const {
  absl::StatusOr<std::optional<std::vector<int64_t>>> list =
      OptionalIntList(pos, name);
  if (!list.ok()) return list.status();
  if (!list->has_value()) {
    return Error(absl::StrCat("missing int list argument ", name,
                              " (position ", pos, ")"));
  }
  return std::move(**list);
}

absl::StatusOr<std::vector<int64_t>> NodeArgs::IntList(
    int pos, const char* name, std::vector<int64_t> def) const {
  absl::StatusOr<std::optional<std::vector<int64_t>>> list =
      OptionalIntList(pos, name);
  if (!list.ok()) return list.status();
  if (!list->has_value()) return def;
  return std::move(**list);
}

const void* NodeArgs::ConstantData(int pos, const char* name) const {
  const Arg* arg = Find(pos, name);
  if (arg == nullptr || arg->kind != Arg::Kind::kTensor) return nullptr;
  const int node = arg->tensor.node;
  if (node < 0 || node >= static_cast<int>(constant_data_.size())) {
    return nullptr;
  }
  return constant_data_[node];
}

std::string NodeArgs::ConstantKey(int pos, const char* name) const {
  if (ConstantData(pos, name) == nullptr) return "";
  return graph_.nodes[Find(pos, name)->tensor.node].share_key;
}

}  // namespace kiln::runtime
