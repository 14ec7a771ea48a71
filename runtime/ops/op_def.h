// What every op in the registry provides: a prepare function that checks a
// node's arguments, infers its outputs and builds its kernel.
//
// Prepare functions receive client input: every problem is reported as
// INVALID_ARGUMENT (or UNIMPLEMENTED for a supported op used in a way the
// kernel does not handle), never asserted.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/kernel.h"

namespace kiln::runtime {

// Read access to one node's arguments, for prepare functions. Positions and
// names follow the ATen schema of the op; an argument may arrive either
// positionally or as a kwarg, and absent trailing arguments take defaults.
class NodeArgs {
 public:
  // `constant_data[i]` is the data of node i if it is a constant, else null.
  NodeArgs(const Graph& graph, const Node& node,
           const std::vector<const void*>& constant_data);

  const Node& node() const { return node_; }
  // The argument at `pos` / named `name`, or null when absent or None.
  const Arg* Find(int pos, const char* name) const;

  // Typed getters: INVALID_ARGUMENT naming the node when the argument is
  // missing (and no default is given) or of the wrong kind.
  absl::StatusOr<TensorMeta> Tensor(int pos, const char* name) const;
  absl::StatusOr<std::optional<TensorMeta>> OptionalTensor(
      int pos, const char* name) const;
  absl::StatusOr<int64_t> Int(int pos, const char* name) const;
  absl::StatusOr<int64_t> Int(int pos, const char* name, int64_t def) const;
  absl::StatusOr<double> Float(int pos, const char* name) const;
  absl::StatusOr<double> Float(int pos, const char* name, double def) const;
  absl::StatusOr<bool> Bool(int pos, const char* name, bool def) const;
  absl::StatusOr<std::vector<int64_t>> IntList(int pos, const char* name) const;
  absl::StatusOr<std::vector<int64_t>> IntList(
      int pos, const char* name, std::vector<int64_t> def) const;
  // Optional int list (`int[1]? dim`): nullopt when absent or None.
  absl::StatusOr<std::optional<std::vector<int64_t>>> OptionalIntList(
      int pos, const char* name) const;

  // Contiguous data of a tensor argument if it is a graph constant, else
  // null (for prepacking weights at compile time).
  const void* ConstantData(int pos, const char* name) const;

  // An INVALID_ARGUMENT status "node '<name>' (<target>): <msg>".
  absl::Status Error(const std::string& msg) const;
  absl::Status Unimplemented(const std::string& msg) const;

 private:
  const Graph& graph_;
  const Node& node_;
  const std::vector<const void*>& constant_data_;
};

struct PreparedOp {
  std::vector<TensorMeta> outputs;
  std::unique_ptr<Kernel> kernel;
};

using PrepareFn = absl::StatusOr<PreparedOp> (*)(const NodeArgs& args);

struct OpDef {
  const char* target;  // "aten.addmm.default"
  DTypeMask dtypes;    // element types of tensor inputs the kernel accepts
  PrepareFn prepare;
};

}  // namespace kiln::runtime
