// Dynamic-shape graphs. The client sends a graph whose placeholders may
// have symbolic (-1) dimensions and whose SymbolicSize nodes stand for
// sizes known only per call; it compiles to a template (Session keeps it),
// and runtime::SpecializeGraph (runtime/ir/specialize.h) turns the template
// plus concrete input metas and size values into an ordinary static graph,
// compiled and cached like any other. The client traces, partitions and
// uploads once; new shapes cost the daemon a compile of the variant (or a
// cache hit) and nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/v1/kiln.pb.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::server {

// A validated template and what it was compiled with.
struct GraphTemplate {
  kiln::v1::Graph graph;
  std::map<std::string, std::string> options;
  bool model_caching = false;
  int num_inputs = 0;  // Placeholder nodes
  int num_sizes = 0;   // SymbolicSize nodes
  std::string key;     // structural key of the template (naming only)
  // Its constants, held so the store keeps them for later variants.
  std::vector<runtime::ConstantData> constants;
};

}  // namespace kiln::server
