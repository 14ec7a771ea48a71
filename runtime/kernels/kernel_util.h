// Small helpers shared by the ops' prepare functions: argument checks that
// produce the node-named INVALID_ARGUMENT errors, and mapping an argument to
// its slot in KernelContext::inputs.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/ir/tensor_meta.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// INVALID_ARGUMENT unless `meta` has element type `dtype`.
absl::Status RequireDType(const NodeArgs& args, const TensorMeta& meta,
                          const char* what, DType dtype = DType::kF32);

// INVALID_ARGUMENT unless `meta` has a type the data movement ops move
// (kMovable: any valid dtype).
absl::Status RequireMovable(const NodeArgs& args, const TensorMeta& meta, const char* what);

// The index in KernelContext::inputs of the tensor argument (pos, name), or
// -1 when it is absent. Kernels receive tensors in the order of
// TensorInputsOf (args, then kwargs), so an absent optional tensor shifts
// the ones after it. For a `Tensor[]` argument, the index of its first
// item (the others follow it).
int InputIndex(const NodeArgs& args, int pos, const char* name);
inline int InputIndex(const NodeArgs& args, ArgSlot a) {
  return InputIndex(args, static_cast<int>(a.pos), a.name);
}

// Whether the switch `name` in the daemon's environment leaves a kernel on:
// unset or any value but "0" (KILN_WINOGRAD=0 and the like, for
// comparisons). Callers read it once.
bool KernelSwitchOn(const char* name);

// Wraps a possibly negative `dim` into [0, rank); rank 0 tensors accept
// -1 and 0 like PyTorch.
absl::StatusOr<int> WrapDim(const NodeArgs& args, int64_t dim, int rank);

// An ATen `int[2]` given as one or two values, as two values.
absl::StatusOr<std::array<int64_t, 2>> ExpandPair(
    const NodeArgs& args, const std::vector<int64_t>& values,
    const char* name);

// "[1,2,3]" for messages.
std::string ShapeString(const std::vector<int64_t>& shape);

// Product of shape[begin, end).
int64_t Product(const std::vector<int64_t>& shape, int begin, int end);

}  // namespace kiln::runtime
