// The op table at run time: every op of ops.def with its prepare
// function, and what passes ask of it. The table itself, and the
// compile-time lookups (KILN_ARG), are in ops/op_table.h.
#pragma once

#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "runtime/ops/op_table.h"

namespace kiln::runtime {

// Every op, in ops.def order. The index of an op is stable for one build.
absl::Span<const OpDef> AllOps();
// Index of `target` in AllOps(), or -1 when unsupported.
int FindOp(std::string_view target);

// The schema entry of op node `node` (by its op_index, or its target when
// the index is unset); null for inputs, constants and unknown targets.
const OpDef* OpOf(const Node& node);
// Whether op node `node` has every bit of `trait` (false for non-ops).
bool HasTrait(const Node& node, uint32_t trait);
// The names of `traits`' flags (kTraitFlagNames), then "post_op" when it
// is one: what capabilities tell clients.
std::vector<std::string_view> TraitNames(const OpTraits& traits);

}  // namespace kiln::runtime
