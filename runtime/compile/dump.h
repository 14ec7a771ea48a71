// Text form of a compiled graph for users who want to see what the compiler
// did (KILN_DUMP): one line per executed step, with fused nodes shown by
// the names of every node they absorbed, plus aliases and folded constants.
#pragma once

#include <string>

#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

std::string DumpCompiledGraph(const CompiledGraph& graph);

}  // namespace kiln::runtime
