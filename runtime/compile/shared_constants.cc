#include "runtime/compile/shared_constants.h"

#include <algorithm>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/util/sha256.h"

namespace kiln::runtime {
namespace {

struct WeakConstant {
  std::weak_ptr<const uint8_t> bytes;
  int64_t size = 0;
  std::vector<TensorMeta> outputs;
};

struct Table {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, WeakConstant> by_key ABSL_GUARDED_BY(mu);
  // Expired entries are dropped as the table grows, so it stays
  // proportional to the live constants.
  size_t sweep_at ABSL_GUARDED_BY(mu) = 256;
};

Table& Shared() {
  static auto* table = new Table;
  return *table;
}

std::optional<SharedConstant> Lock(const WeakConstant& weak) {
  auto bytes = weak.bytes.lock();
  if (!bytes) return std::nullopt;
  return SharedConstant{ConstantData{std::move(bytes), weak.size}, weak.outputs};
}

// Appends `arg`; false when it reads a tensor without a share key.
bool AppendArg(const Graph& graph, const Arg& arg, std::string* out) {
  return AppendArgKey(arg, out, [&graph](ValueRef ref, std::string* key) {
    const Node& src = graph.nodes[ref.node];
    // A constant's key, or that of an op being folded with it.
    if (src.kind == Node::Kind::kInput || src.share_key.empty()) return false;
    absl::StrAppend(key, "@", src.share_key, ":", ref.output, ":",
                    graph.MetaOf(ref).ToString());
    return true;
  });
}

}  // namespace

std::string StoreConstantKey(const std::string& content_hash) {
  return absl::StrCat("h:", content_hash);
}

std::string DerivedConstantKey(absl::string_view description) {
  return absl::StrCat("d:", Sha256Hex(description.data(), description.size()));
}

std::string FoldDescription(const Graph& graph, const Node& node) {
  std::string out = absl::StrCat("fold|", node.target, "|", CompileOptionsString(graph.options), "|");
  for (const Arg& arg : node.args) {
    if (!AppendArg(graph, arg, &out)) return "";
  }
  for (const NamedArg& kw : node.kwargs) {
    absl::StrAppend(&out, kw.name, "=");
    if (!AppendArg(graph, kw.value, &out)) return "";
  }
  return out;
}

std::optional<SharedConstant> FindShared(const std::string& key) {
  Table& t = Shared();
  absl::MutexLock lock(&t.mu);
  auto it = t.by_key.find(key);
  if (it == t.by_key.end()) return std::nullopt;
  return Lock(it->second);
}

SharedConstant PublishShared(const std::string& key, SharedConstant constant) {
  Table& t = Shared();
  absl::MutexLock lock(&t.mu);
  auto [it, inserted] = t.by_key.try_emplace(key);
  if (!inserted) {
    if (auto live = Lock(it->second)) return *std::move(live);
  }
  it->second = WeakConstant{constant.data.bytes, constant.data.size, constant.outputs};
  if (t.by_key.size() >= t.sweep_at) {
    absl::erase_if(t.by_key, [](const auto& kv) { return kv.second.bytes.expired(); });
    t.sweep_at = std::max<size_t>(256, 2 * t.by_key.size());
  }
  return constant;
}

}  // namespace kiln::runtime
