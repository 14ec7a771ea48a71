// The structural key of a compile request: SHA-256 over the graph without
// node names (so renaming never misses), its constant hashes (inside the
// graph), the compile options, the runtime version and the CPU features.
#pragma once

#include <map>
#include <string>

#include "kiln/v1/kiln.pb.h"

namespace kiln::cache {

// The graph with names cleared, serialized deterministically.
std::string CanonicalGraphBytes(const kiln::v1::Graph& graph);

std::string GraphKey(const kiln::v1::Graph& graph,
                     const std::map<std::string, std::string>& options);

}  // namespace kiln::cache
