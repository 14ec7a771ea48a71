// Compilation of a decoded graph: resolve constants, prepare every op (which
// checks its arguments and infers output metas), then plan memory.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

// Looks up a constant by content hash: NOT_FOUND when absent.
using ConstantResolver =
    std::function<absl::StatusOr<ConstantData>(const std::string& hash)>;

struct CompileLimits {
  // Refuse graphs whose planned intermediates exceed this (bytes).
  int64_t max_arena_bytes = int64_t{16} << 30;
};

struct CompileHints {
  // Keep the constants compile derived (folds) even where runs do not read
  // them: for the shape variants of one dynamic-shape graph, each of which
  // would otherwise derive them again (compile/shared_constants.h finds
  // them only while some graph holds them).
  bool keep_derived_constants = false;
  // Called with the hash of a client constant once every kernel that takes
  // it is prepared, none reads it at run time (they packed or copied it)
  // and the compile has let go of its bytes: the caller may drop its own
  // copy now rather than hold it beside the packed one until the compile
  // ends. Not called for constants the compile derived or keeps.
  std::function<void(const std::string& hash)> release_constant;
  // Called once the passes are done, before any kernel is prepared, with
  // the graph they leave and each node's constant bytes (null for non-
  // constants): what an artifact records so that CompileOptimized can
  // start from it. The bytes are only valid during the call.
  std::function<void(const Graph& graph, const std::vector<const void*>& constant_data)>
      on_optimized;
};

// FAILED_PRECONDITION for constants a graph names that the daemon's store
// lacks: `first` describes one ("node 'x': constant <hash>"), `hashes` are
// all of them (the client uploads them and compiles again). The status
// carries the hashes, for MissingConstantsOf.
absl::Status MissingConstantsError(const std::string& first,
                                   const std::vector<std::string>& hashes);

// The hashes a MissingConstantsError names, each once; empty for any other
// status.
std::vector<std::string> MissingConstantsOf(const absl::Status& status);

// INVALID_ARGUMENT / UNIMPLEMENTED naming the node for bad or unsupported
// input; FAILED_PRECONDITION when a constant was not uploaded.
absl::StatusOr<std::unique_ptr<CompiledGraph>> Compile(
    Graph graph, const ConstantResolver& constants,
    const CompileLimits& limits = {}, const CompileHints& hints = {});

// Compile from a graph Compile's passes left (CompileHints::on_optimized,
// kept in an artifact: ir/optimized_proto.h), running no pass: constants,
// the shape sweep, kernels and the memory plan. Client constants come from
// `constants` by store hash, `inline_constants` by node index, and derived
// ones by share key from the live shared constants or the installed
// persistence (compile/constant_persistence.h); NOT_FOUND when one is in
// neither (the caller compiles the original graph instead).
absl::StatusOr<std::unique_ptr<CompiledGraph>> CompileOptimized(
    Graph optimized, std::vector<std::pair<int, ConstantData>> inline_constants,
    const ConstantResolver& constants, const CompileLimits& limits = {},
    const CompileHints& hints = {});

}  // namespace kiln::runtime
