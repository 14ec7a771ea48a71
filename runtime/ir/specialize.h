// Shape specialization of dynamic-shape graphs. The client sends a graph
// whose placeholders may have symbolic (-1) dimensions and whose
// SymbolicSize nodes stand for sizes known only per call; the daemon keeps
// it as a template (server/graph_template.h), and SpecializeGraph turns the
// template plus concrete input metas and size values into an ordinary
// static graph, which from_proto.h then decodes like any other. It works on
// the wire form because a template cannot be decoded before its sizes are
// known.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/kiln.pb.h"

namespace kiln::runtime {

// True when the graph has a SymbolicSize node or a symbolic placeholder
// dimension: it must go through SpecializeGraph.
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

}  // namespace kiln::runtime
