// Dynamic-shape graphs. The client sends a graph whose placeholders may
// have symbolic (-1) dimensions and whose SymbolicSize nodes stand for
// sizes known only per call; it compiles to a template (Session keeps it),
// and Specialize turns the template plus concrete input metas and size
// values into an ordinary static graph, compiled and cached like any other.
// The client traces, partitions and uploads once; new shapes cost the
// daemon a compile of the variant (or a cache hit) and nothing else.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

// True when the graph has a SymbolicSize node or a symbolic placeholder
// dimension: it must go through Specialize.
bool IsDynamic(const kiln::v1::Graph& graph);

// Structural checks the full compile cannot do before values are known:
// references point to earlier nodes, sizes are used only as arguments (not
// as tensors or graph outputs), placeholder metas are well formed.
absl::Status ValidateTemplate(const kiln::v1::Graph& graph);

// The static graph for these input metas (one per Placeholder, same dtype
// and rank, equal static dimensions; strides are those of a contiguous
// tensor) and size values (one per SymbolicSize). SymbolicSize nodes are
// dropped and every argument naming one becomes its value.
absl::StatusOr<kiln::v1::Graph> SpecializeGraph(
    const kiln::v1::Graph& tmpl,
    const google::protobuf::RepeatedPtrField<kiln::v1::TensorMeta>& inputs,
    const google::protobuf::RepeatedField<int64_t>& sizes);

}  // namespace kiln::server
