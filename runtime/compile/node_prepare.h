// Preparing one node for the compiler: its inputs checked against its op's
// schema, its prepare function run, its outputs validated.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/ir/graph.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// An error naming `node` and its target.
absl::Status NodeError(const Node& node, absl::string_view msg);

// Runs `node`'s prepare function (ops.def) after checking its inputs'
// references and dtypes; with `shape_only`, infers its outputs and builds
// no kernel.
absl::StatusOr<PreparedOp> PrepareNode(const Graph& g, const Node& node,
                                       const std::vector<const void*>& constant_data,
                                       bool shape_only);

}  // namespace kiln::runtime
