#include "runtime/compile/shared_constants.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kiln::runtime {
namespace {

struct WeakFold {
  std::weak_ptr<const uint8_t> bytes;
  int64_t size = 0;
  std::vector<TensorMeta> outputs;
};

struct WeakConstant {
  std::weak_ptr<const uint8_t> bytes;
  int64_t size = 0;
};

// Both tables drop expired entries as they grow, so they stay proportional
// to the live constants.
struct Tables {
  absl::Mutex mu;
  absl::flat_hash_map<std::string, WeakFold> folds ABSL_GUARDED_BY(mu);
  size_t sweep_folds_at ABSL_GUARDED_BY(mu) = 256;
  absl::flat_hash_map<size_t, std::vector<WeakConstant>> by_content ABSL_GUARDED_BY(mu);
  size_t sweep_content_at ABSL_GUARDED_BY(mu) = 256;
};

Tables& Shared() {
  static auto* tables = new Tables;
  return *tables;
}

void AppendArg(const Graph& graph, const Arg& arg, const std::vector<const void*>& constant_data,
               std::string* key) {
  switch (arg.kind) {
    case Arg::Kind::kTensor:
      absl::StrAppend(key, "@", reinterpret_cast<uintptr_t>(constant_data[arg.tensor.node]), ":",
                      arg.tensor.output, ":", graph.MetaOf(arg.tensor).ToString());
      break;
    case Arg::Kind::kList:
      absl::StrAppend(key, "[");
      for (const Arg& item : arg.list) AppendArg(graph, item, constant_data, key);
      absl::StrAppend(key, "]");
      break;
    case Arg::Kind::kFloat: {
      uint64_t bits;
      std::memcpy(&bits, &arg.f, sizeof bits);  // exact, unlike a decimal print
      absl::StrAppend(key, "f", bits);
      break;
    }
    default:
      absl::StrAppend(key, "k", static_cast<int>(arg.kind), ":", arg.i, ":", arg.b ? 1 : 0, ":",
                      arg.s.size(), ":", arg.s);
  }
  absl::StrAppend(key, ",");
}

std::optional<SharedFold> LockFold(const WeakFold& weak) {
  auto bytes = weak.bytes.lock();
  if (!bytes) return std::nullopt;
  return SharedFold{ConstantData{std::move(bytes), weak.size}, weak.outputs};
}

}  // namespace

std::string FoldRecipe(const Graph& graph, const Node& node,
                       const std::vector<const void*>& constant_data) {
  std::string key = absl::StrCat(node.target, "|", CompileOptionsString(graph.options), "|");
  for (const Arg& arg : node.args) AppendArg(graph, arg, constant_data, &key);
  for (const NamedArg& kw : node.kwargs) {
    absl::StrAppend(&key, kw.name, "=");
    AppendArg(graph, kw.value, constant_data, &key);
  }
  return key;
}

std::optional<SharedFold> FindFold(const std::string& recipe) {
  Tables& t = Shared();
  absl::MutexLock lock(&t.mu);
  auto it = t.folds.find(recipe);
  if (it == t.folds.end()) return std::nullopt;
  return LockFold(it->second);
}

SharedFold PublishFold(const std::string& recipe, SharedFold fold) {
  Tables& t = Shared();
  absl::MutexLock lock(&t.mu);
  auto [it, inserted] = t.folds.try_emplace(recipe);
  if (!inserted) {
    if (auto live = LockFold(it->second)) return *std::move(live);
  }
  it->second = WeakFold{fold.data.bytes, fold.data.size, fold.outputs};
  if (t.folds.size() >= t.sweep_folds_at) {
    absl::erase_if(t.folds, [](const auto& kv) { return kv.second.bytes.expired(); });
    t.sweep_folds_at = std::max<size_t>(256, 2 * t.folds.size());
  }
  return fold;
}

ConstantData InternConstant(ConstantData data) {
  if (data.size < kMinSharedConstantBytes) return data;
  const absl::string_view content(reinterpret_cast<const char*>(data.bytes.get()),
                                  static_cast<size_t>(data.size));
  const size_t hash = absl::HashOf(content);
  Tables& t = Shared();
  absl::MutexLock lock(&t.mu);
  std::vector<WeakConstant>& bucket = t.by_content[hash];
  for (const WeakConstant& weak : bucket) {
    if (weak.size != data.size) continue;
    auto live = weak.bytes.lock();
    if (live && std::memcmp(live.get(), data.bytes.get(), content.size()) == 0) {
      return ConstantData{std::move(live), data.size};
    }
  }
  bucket.push_back(WeakConstant{data.bytes, data.size});
  if (t.by_content.size() >= t.sweep_content_at) {
    for (auto& [h, list] : t.by_content) {
      list.erase(std::remove_if(list.begin(), list.end(),
                                [](const WeakConstant& w) { return w.bytes.expired(); }),
                 list.end());
    }
    absl::erase_if(t.by_content, [](const auto& kv) { return kv.second.empty(); });
    t.sweep_content_at = std::max<size_t>(256, 2 * t.by_content.size());
  }
  return data;
}

}  // namespace kiln::runtime
