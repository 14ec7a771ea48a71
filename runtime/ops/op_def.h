// What every op in the registry provides: a prepare function that checks a
// node's arguments, infers its outputs and builds its kernel; and its traits
// (ops/op_traits.h), which passes read.
//
// Prepare functions receive client input: every problem is reported as
// INVALID_ARGUMENT (or UNIMPLEMENTED for a supported op used in a way the
// kernel does not handle), never asserted.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/kernel.h"
#include "runtime/ops/op_traits.h"

namespace kiln::runtime {

// Read access to one node's arguments, for prepare functions. Positions and
// names follow the ATen schema of the op; an argument may arrive either
// positionally or as a kwarg, and absent trailing arguments take defaults.
class NodeArgs {
 public:
  // `constant_data[i]` is the data of node i if it is a constant, else null.
  // With `shape_only`, the caller needs only the output metas (compile-time
  // passes run a shape sweep before choosing kernels): prepare functions
  // whose kernels are expensive to build (oneDNN primitives, prepacking)
  // may return a PreparedOp without a kernel. Others can ignore it.
  // `options` are the graph's compile options (the compiler passes
  // graph.options); kernels read precision from them.
  NodeArgs(const Graph& graph, const Node& node,
           const std::vector<const void*>& constant_data,
           bool shape_only = false, const CompileOptions& options = {});

  const Node& node() const { return node_; }
  bool shape_only() const { return shape_only_; }
  const CompileOptions& options() const { return options_; }
  // The argument at `pos` / named `name`, or null when absent or None.
  const Arg* Find(int pos, const char* name) const;
  const Arg* Find(ArgSlot a) const { return Find(Pos(a), a.name); }

  // Typed getters: INVALID_ARGUMENT naming the node when the argument is
  // missing (and no default is given) or of the wrong kind.
  absl::StatusOr<TensorMeta> Tensor(int pos, const char* name) const;
  absl::StatusOr<std::optional<TensorMeta>> OptionalTensor(
      int pos, const char* name) const;
  // A list of tensors (`Tensor[] tensors`, e.g. aten.cat): one meta per
  // item; INVALID_ARGUMENT when absent or when an item is not a tensor.
  absl::StatusOr<std::vector<TensorMeta>> TensorList(int pos,
                                                     const char* name) const;
  // A list of optional tensors (`Tensor?[] indices`, e.g. aten.index):
  // nullopt for None items.
  absl::StatusOr<std::vector<std::optional<TensorMeta>>> OptionalTensorList(
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
  // That constant's Node::share_key: empty when it has none (then what a
  // kernel derives from it is not shared) or the argument is no constant.
  std::string ConstantKey(int pos, const char* name) const;

  // The same, for an internal op's argument named by its schema
  // (KILN_ARG in ops/op_table.h).
  absl::StatusOr<TensorMeta> Tensor(ArgSlot a) const { return Tensor(Pos(a), a.name); }
  absl::StatusOr<std::optional<TensorMeta>> OptionalTensor(ArgSlot a) const {
    return OptionalTensor(Pos(a), a.name);
  }
  absl::StatusOr<int64_t> Int(ArgSlot a) const { return Int(Pos(a), a.name); }
  absl::StatusOr<int64_t> Int(ArgSlot a, int64_t def) const { return Int(Pos(a), a.name, def); }
  absl::StatusOr<double> Float(ArgSlot a) const { return Float(Pos(a), a.name); }
  absl::StatusOr<bool> Bool(ArgSlot a, bool def) const { return Bool(Pos(a), a.name, def); }
  absl::StatusOr<std::vector<int64_t>> IntList(ArgSlot a) const { return IntList(Pos(a), a.name); }
  absl::StatusOr<std::vector<int64_t>> IntList(ArgSlot a, std::vector<int64_t> def) const {
    return IntList(Pos(a), a.name, std::move(def));
  }
  const void* ConstantData(ArgSlot a) const { return ConstantData(Pos(a), a.name); }
  std::string ConstantKey(ArgSlot a) const { return ConstantKey(Pos(a), a.name); }

  // An INVALID_ARGUMENT status "node '<name>' (<target>): <msg>".
  absl::Status Error(const std::string& msg) const;
  absl::Status Unimplemented(const std::string& msg) const;

 private:
  static int Pos(ArgSlot a) { return static_cast<int>(a.pos); }

  const Graph& graph_;
  const Node& node_;
  const std::vector<const void*>& constant_data_;
  const bool shape_only_;
  const CompileOptions options_;  // a copy: small, and the default is a temporary
};

struct PreparedOp {
  std::vector<TensorMeta> outputs;
  std::unique_ptr<Kernel> kernel;
  // Constant inputs (by their data) the kernel copied at prepare time
  // (packed weights, biases) and never reads at run time: the compiled
  // graph need not keep them.
  std::vector<const void*> consumed_constants;
};

using PrepareFn = absl::StatusOr<PreparedOp> (*)(const NodeArgs& args);

struct OpDef {
  const char* target;  // "aten.addmm.default"
  DTypeMask dtypes;    // element types of tensor inputs the kernel accepts
  PrepareFn prepare;
  // Internal ops ("kiln.*") are produced by compile passes only: never in
  // capabilities, refused in client graphs.
  bool internal = false;
  OpTraits traits;
};

}  // namespace kiln::runtime
