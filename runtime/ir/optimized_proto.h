// The optimized graph of a compiled artifact (kiln.v1.OptimizedGraph in
// proto/kiln/v1/artifact.proto): the graph Compile's passes leave, written
// so that a later compile of the same key starts from it and runs no pass
// (compile/compiler.h, CompileOptimized).
//
// Constants are named by share key (compile/shared_constants.h), so their
// bytes come from the constant store, the live shared constants or the
// cache directory's saved ones; only derived constants without a key carry
// their bytes. Decoding checks what GraphFromProto checks (references to
// earlier nodes, known ops, valid metas), internal kiln.* ops allowed: the
// artifact is the daemon's own output, verified by its store, but a
// decoder that trusts its input is one bad file away from a crash.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/artifact.pb.h"
#include "runtime/compile/constant_data.h"
#include "runtime/ir/graph.h"

namespace kiln::runtime {

// Writes `graph` as its inputs (all of them), then the constants its live
// ops or outputs read, then its live ops in their order (dead nodes and
// unread constants dropped). `constant_data[i]` holds the bytes
// of constant node i; those of constants without a share key are copied
// in. False (and `out` left incomplete) when the graph cannot be
// described: those bytes pass `max_inline_bytes` in all, or a live node
// reads a dead one.
bool OptimizedGraphToProto(const Graph& graph, const std::vector<const void*>& constant_data,
                           int64_t max_inline_bytes, kiln::v1::OptimizedGraph* out);

struct DecodedOptimizedGraph {
  // Constants carry their share key, and client constants their store
  // hash (constant_hash).
  Graph graph;
  // The bytes of the constants kept inline, by node index.
  std::vector<std::pair<int, ConstantData>> inline_constants;
};

// INVALID_ARGUMENT naming the node for anything OptimizedGraphToProto
// would not have written.
absl::StatusOr<DecodedOptimizedGraph> OptimizedGraphFromProto(
    const kiln::v1::OptimizedGraph& proto);

}  // namespace kiln::runtime
