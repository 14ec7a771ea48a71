// Decoding of the wire graph (kiln.v1.Graph) into the runtime IR.
//
// Everything in the message is untrusted: decoding checks that node
// references point to earlier nodes, that every call names an op in the
// registry, that literal kinds are known, and that placeholder and constant
// metas are valid, dense and contiguous. Errors are INVALID_ARGUMENT naming
// the node. Output-index checks happen at compile time, once each op's
// outputs are known.
#pragma once

#include "absl/status/statusor.h"
#include "kiln/v1/kiln.pb.h"
#include "runtime/ir/graph.h"

namespace kiln::runtime {

// Limits that keep a hostile message from exhausting memory or stack.
inline constexpr int kMaxGraphNodes = 1 << 20;
inline constexpr int kMaxArgDepth = 8;

absl::StatusOr<Graph> GraphFromProto(const kiln::v1::Graph& proto);

// One argument of node `self`: its tensor references must name earlier
// nodes; lists nest at most kMaxArgDepth deep.
absl::StatusOr<Arg> ArgFromProto(const kiln::v1::Argument& proto, int self, int depth = 0);

// Meta of a TensorMeta message; strides, when given, must be contiguous.
absl::StatusOr<TensorMeta> MetaFromProto(const kiln::v1::TensorMeta& proto);
void MetaToProto(const TensorMeta& meta, kiln::v1::TensorMeta* proto);

}  // namespace kiln::runtime
