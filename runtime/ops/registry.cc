#include "runtime/ops/registry.h"

#include "absl/container/flat_hash_map.h"
#include "runtime/ops/prepare_fns.h"

namespace kiln::runtime {
namespace {

constexpr OpDef kOps[] = {
#define KILN_OP(target, dtypes, fn) OpDef{target, dtypes, &fn, false},
#define KILN_INTERNAL_OP(target, dtypes, fn) OpDef{target, dtypes, &fn, true},
#include "runtime/ops/ops.def"
#undef KILN_INTERNAL_OP
#undef KILN_OP
};

}  // namespace

absl::Span<const OpDef> AllOps() { return absl::MakeConstSpan(kOps); }

int FindOp(std::string_view target) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, int>();
    for (int i = 0; i < static_cast<int>(std::size(kOps)); ++i) {
      m->emplace(kOps[i].target, i);
    }
    return m;
  }();
  auto it = index->find(target);
  return it == index->end() ? -1 : it->second;
}

}  // namespace kiln::runtime
