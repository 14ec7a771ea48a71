#include "runtime/passes/pass_context.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/ops/registry.h"
#include "runtime/util/large_alloc.h"

namespace kiln::runtime {
namespace {

void ReplaceInArg(Arg& arg, ValueRef from, ValueRef to) {
  if (arg.kind == Arg::Kind::kTensor && arg.tensor == from) {
    arg.tensor = to;
  } else if (arg.kind == Arg::Kind::kList) {
    for (Arg& item : arg.list) ReplaceInArg(item, from, to);
  }
}

}  // namespace

int PassContext::AddConstant(const std::string& name, const TensorMeta& meta,
                             const void* bytes, const std::string& share_key) {
  auto [index, data] = AddUninitializedConstant(name, meta, share_key);
  std::memcpy(data, bytes, static_cast<size_t>(meta.ByteSize()));
  return index;
}

std::pair<int, void*> PassContext::AddUninitializedConstant(const std::string& name,
                                                            const TensorMeta& meta,
                                                            const std::string& share_key) {
  const size_t size = static_cast<size_t>(meta.ByteSize());
  // 64 bytes past the end: kernels may read a vector past the last value.
  std::shared_ptr<uint8_t> raw = SharedLarge((size + 127) / 64 * 64);
  if (raw == nullptr) throw std::bad_alloc();
  ConstantData data{raw, static_cast<int64_t>(size)};
  return {AddFoundConstant(name, meta, share_key, std::move(data)), raw.get()};
}

std::optional<ConstantData> PassContext::FindDerived(const std::string& share_key,
                                                     const TensorMeta& meta) {
  if (share_key.empty()) return std::nullopt;
  if (std::optional<SharedConstant> live = FindShared(share_key)) {
    if (live->data.size == meta.ByteSize()) return std::move(live->data);
    return std::nullopt;
  }
  if (ConstantPersistence* persistence = CurrentPersistence()) {
    return persistence->Load(share_key, meta.ByteSize(), /*defer_check=*/true);
  }
  return std::nullopt;
}

int PassContext::AddFoundConstant(const std::string& name, const TensorMeta& meta,
                                  const std::string& share_key, ConstantData data) {
  Node node;
  node.kind = Node::Kind::kConstant;
  node.name = name;
  node.share_key = share_key;
  node.outputs.push_back(meta);
  graph.nodes.push_back(std::move(node));
  constant_data.push_back(data.bytes.get());
  created.push_back(std::move(data));
  return static_cast<int>(graph.nodes.size()) - 1;
}

absl::Status BadSavedConstant(const Node& node) {
  return absl::DataLossError(absl::StrCat("node '", node.name,
                                          "': a constant saved in the cache directory failed its "
                                          "checksum (removed; compile again)"));
}

bool IsIntList(const Arg& a, std::initializer_list<int64_t> values) {
  if (a.kind != Arg::Kind::kList || a.list.size() != values.size()) return false;
  auto it = values.begin();
  for (const Arg& item : a.list) {
    if (item.kind != Arg::Kind::kInt || item.i != *it++) return false;
  }
  return true;
}

Uses ComputeUses(const Graph& graph) {
  Uses uses;
  const int n = static_cast<int>(graph.nodes.size());
  uses.users.resize(n);
  uses.is_output.resize(n);
  for (int i = 0; i < n; ++i) {
    uses.users[i].resize(graph.nodes[i].outputs.size());
    uses.is_output[i].resize(graph.nodes[i].outputs.size(), false);
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    for (const ValueRef& ref : TensorInputsOf(node)) {
      if (ref.output < static_cast<int>(uses.users[ref.node].size())) {
        uses.users[ref.node][ref.output].push_back(i);
      }
    }
  }
  for (const ValueRef& out : graph.outputs) {
    if (out.output < static_cast<int>(uses.is_output[out.node].size())) {
      uses.is_output[out.node][out.output] = true;
    }
  }
  return uses;
}

void ReplaceAllUses(Graph& graph, ValueRef from, ValueRef to) {
  for (Node& node : graph.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    for (Arg& a : node.args) ReplaceInArg(a, from, to);
    for (NamedArg& a : node.kwargs) ReplaceInArg(a.value, from, to);
  }
  for (ValueRef& out : graph.outputs) {
    if (out == from) out = to;
  }
}

void EliminateDeadNodes(Graph& graph) {
  // Backwards, so a chain of unused nodes goes in one sweep.
  Uses uses = ComputeUses(graph);
  for (int i = static_cast<int>(graph.nodes.size()) - 1; i >= 0; --i) {
    Node& node = graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    bool used = false;
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      for (int user : uses.users[i][o]) used |= !graph.nodes[user].dead;
      used |= uses.is_output[i][o];
    }
    if (!used && !HasTrait(node, kSideEffects)) node.dead = true;
  }
}

}  // namespace kiln::runtime
