// Constants the compiler derives from other constants (folded transposes
// and casts, batch-norm-folded weights, weights in another layout), shared
// between the compiled graphs that derive the same bytes.
//
// The shape variants of one dynamic-shape graph (server/specialize.h) and
// recompiles of one model with other options fold the same weights the
// same way; without sharing, each would hold its own copy of every derived
// weight. Entries are weak: a derived constant lives as long as some
// compiled graph owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

// What a constant fold computes, as a key: the op, its literal arguments
// and, for each tensor argument, the address and meta of the constant it
// reads. Sound as a key because a fold's inputs are owned by every graph
// that owns its result, so their addresses cannot be reused meanwhile.
std::string FoldRecipe(const Graph& graph, const Node& node,
                       const std::vector<const void*>& constant_data);

struct SharedFold {
  ConstantData data;
  std::vector<TensorMeta> outputs;
};

// The live result of an earlier fold with this recipe, if any.
std::optional<SharedFold> FindFold(const std::string& recipe);
// Records a fold's result; when another compile recorded the same recipe
// meanwhile, returns that one instead (use it, drop yours).
SharedFold PublishFold(const std::string& recipe, SharedFold fold);

// A live constant with exactly these bytes if there is one (compared, not
// just hashed), else `data` itself, now findable by later compiles. For
// constants built by passes, whose recipes are not uniform.
ConstantData InternConstant(ConstantData data);

// Constants smaller than this are not worth a lookup.
inline constexpr int64_t kMinSharedConstantBytes = 4096;

}  // namespace kiln::runtime
