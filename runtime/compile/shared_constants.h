// Constants the compiler derives from other constants (folded transposes
// and casts, batch-norm-folded weights), shared between the compiled
// graphs that derive the same bytes.
//
// Every constant node has a share key (Node::share_key) saying what its
// bytes are rather than where they live: "h:<sha256>" for a client's
// constant (the store checked the hash on upload), and for a derived one
// a digest of how it was computed from the keys of its inputs. Equal keys
// mean equal bytes, so a derived constant, or a weight packed from one
// (kernels/onednn_util.h, PackConstant), can be found by key even after
// the constant it came from was dropped.
//
// The shape variants of one dynamic-shape graph (server/specialize.h) and
// recompiles of one model fold the same weights the same way; without
// sharing each would hold its own copy of every derived weight. Entries
// are weak: a derived constant lives as long as some compiled graph owns
// it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "runtime/compile/constant_data.h"
#include "runtime/ir/graph.h"

namespace kiln::runtime {

// The share key of the client constant with this store hash.
std::string StoreConstantKey(const std::string& content_hash);

// The share key of a constant computed as `description` says: the
// computation and everything it depends on (literals, options, the share
// keys of the constants it reads).
std::string DerivedConstantKey(absl::string_view description);

// What folding `node` (all of whose tensor inputs are constants, or ops
// folded with it that carry their keys already) computes: the op, the
// graph's compile options, its literal arguments and its inputs' share
// keys. Empty when an input has no share key.
std::string FoldDescription(const Graph& graph, const Node& node);

struct SharedConstant {
  ConstantData data;
  std::vector<TensorMeta> outputs;
};

// The live constant with this share key, if some compiled graph holds one.
std::optional<SharedConstant> FindShared(const std::string& key);
// Records a constant under `key`; when another compile recorded the key
// meanwhile, returns that one instead (use it, drop yours).
SharedConstant PublishShared(const std::string& key, SharedConstant constant);

}  // namespace kiln::runtime
