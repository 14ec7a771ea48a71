// Lookups into the op schema, and the schema's own consistency, checked
// when Kiln is built.
#include "runtime/ops/registry.h"

#include "absl/container/flat_hash_map.h"

namespace kiln::runtime {
namespace {

constexpr bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

constexpr bool TargetsAreUnique() {
  for (int i = 0; i < kNumOps; ++i) {
    for (int j = i + 1; j < kNumOps; ++j) {
      if (std::string_view(kOps[i].target) == kOps[j].target) return false;
    }
  }
  return true;
}

constexpr bool InternalOpsAreKilnOps() {
  for (const OpDef& op : kOps) {
    if (op.internal != StartsWith(op.target, "kiln.")) return false;
  }
  return true;
}

// An alias computes nothing, and a reshape is an alias.
constexpr bool AliasesAreViews() {
  for (const OpDef& op : kOps) {
    const OpTraits& t = op.traits;
    if ((t.Has(kAlias) && !t.Has(kView)) || (t.Has(kReshape) && !t.Has(kAlias))) return false;
  }
  return true;
}

// Scalar functions and post-ops belong to elementwise ops; an op is fused
// into kiln.elementwise by one scalar function.
constexpr bool FusedFormsAreElementwise() {
  for (const OpDef& op : kOps) {
    const OpTraits& t = op.traits;
    if ((t.Fusible() || t.IsPostOp()) && !t.Has(kElementwise)) return false;
    if (t.ew_op >= 0 && t.ew_recipe != nullptr) return false;
    if (t.post_op != nullptr && t.post_op_fn != nullptr) return false;
  }
  return true;
}

// A layout form is an internal op, of an op that follows some layout.
constexpr bool LayoutFormsAreInternalOps() {
  for (const OpDef& op : kOps) {
    if (op.traits.layout_form == nullptr) continue;
    const int form = OpIndexOf(op.traits.layout_form);
    if (form < 0 || !kOps[form].internal || (op.traits.flags & kFollowsLayout) == 0) return false;
  }
  return true;
}

// Exactly the internal ops declare their arguments (public ops take
// ATen's), with distinct names and at most one variadic one, second to
// last.
constexpr bool InternalOpsDeclareTheirArguments() {
  for (const OpDef& op : kOps) {
    if (op.internal != (op.traits.args != nullptr)) return false;
    if (op.traits.args == nullptr) continue;
    const std::string_view names = op.traits.args;
    const int n = schema_internal::NumArgs(names);
    if (n == 0) return false;
    for (int i = 0; i < n; ++i) {
      const std::string_view a = schema_internal::NthArg(names, i);
      const bool variadic = a.size() > 3 && a.substr(a.size() - 3) == "...";
      if (variadic && i != n - 2) return false;
      for (int j = i + 1; j < n; ++j) {
        if (a == schema_internal::NthArg(names, j)) return false;
      }
    }
  }
  return true;
}

// What passes may remove or merge is free of effects.
constexpr bool SideEffectsExcludePureTraits() {
  for (const OpDef& op : kOps) {
    if (op.traits.Has(kSideEffects) &&
        (op.traits.flags & (kAlias | kView | kElementwise)) != 0) {
      return false;
    }
  }
  return true;
}

static_assert(TargetsAreUnique(), "ops.def: a target is declared twice");
static_assert(InternalOpsAreKilnOps(), "ops.def: internal ops are the kiln.* ones");
static_assert(AliasesAreViews(), "ops.def: kAlias needs kView, kReshape needs kAlias");
static_assert(FusedFormsAreElementwise(),
              "ops.def: a scalar function or post-op needs kElementwise, one of each");
static_assert(LayoutFormsAreInternalOps(),
              "ops.def: a layout form is an internal op, of an op following a layout");
static_assert(InternalOpsDeclareTheirArguments(),
              "ops.def: every internal op (and no other) declares distinct argument names");
static_assert(SideEffectsExcludePureTraits(), "ops.def: an op with side effects is no view");

}  // namespace

absl::Span<const OpDef> AllOps() { return absl::MakeConstSpan(kOps); }

int FindOp(std::string_view target) {
  static const auto* index = [] {
    auto* m = new absl::flat_hash_map<std::string_view, int>();
    for (int i = 0; i < kNumOps; ++i) m->emplace(kOps[i].target, i);
    return m;
  }();
  auto it = index->find(target);
  return it == index->end() ? -1 : it->second;
}

const OpDef* OpOf(const Node& node) {
  if (node.kind != Node::Kind::kOp) return nullptr;
  int index = node.op_index;
  if (index < 0 || index >= kNumOps) index = FindOp(node.target);
  return index < 0 ? nullptr : &kOps[index];
}

bool HasTrait(const Node& node, uint32_t trait) {
  const OpDef* op = OpOf(node);
  return op != nullptr && op->traits.Has(trait);
}

std::vector<std::string_view> TraitNames(const OpTraits& traits) {
  std::vector<std::string_view> names;
  for (int bit = 0; bit < kNumTraitFlags; ++bit) {
    if (traits.flags & (1u << bit)) names.push_back(kTraitFlagNames[bit]);
  }
  if (traits.IsPostOp()) names.push_back("post_op");
  return names;
}

}  // namespace kiln::runtime
