// Small helpers shared by the ops' prepare functions: argument checks that
// produce the node-named INVALID_ARGUMENT errors, and mapping an argument to
// its slot in KernelContext::inputs.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/ir/tensor_meta.h"
#include "runtime/kernels/kernel.h"
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

// An ATen `int[n]` (kernel_size, stride, padding, ...) given as one value
// for every dim or as n values, as n values.
absl::StatusOr<std::vector<int64_t>> ExpandList(const NodeArgs& args,
                                                const std::vector<int64_t>& values, int n,
                                                const char* name);

// ExpandList into a fixed-size array, for kernels with a fixed rank.
template <size_t N>
absl::StatusOr<std::array<int64_t, N>> ExpandArray(const NodeArgs& args,
                                                   const std::vector<int64_t>& values,
                                                   const char* name) {
  absl::StatusOr<std::vector<int64_t>> list = ExpandList(args, values, static_cast<int>(N), name);
  if (!list.ok()) return list.status();
  std::array<int64_t, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = (*list)[i];
  return out;
}

inline absl::StatusOr<std::array<int64_t, 2>> ExpandPair(const NodeArgs& args,
                                                         const std::vector<int64_t>& values,
                                                         const char* name) {
  return ExpandArray<2>(args, values, name);
}

// A tensor seen as lines along one dim, as the scans, sorts and softmax
// walk it: outer * inner independent lines of n elements, element k of the
// line starting at `base` at base + k * inner. A 0-dim tensor is one line
// of one element (along dim 0 or -1, as PyTorch accepts).
struct DimLines {
  int dim = 0;
  int64_t outer = 1, n = 1, inner = 1;
  int64_t lines() const { return outer * inner; }
  // The offset of the first element of line `line` in [0, lines()).
  int64_t base(int64_t line) const { return (line / inner) * n * inner + line % inner; }
};
// Lines per ParallelFor task so a task walks at least ~16K elements.
inline int64_t LineGrain(const DimLines& l) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(l.n, 1));
}
absl::StatusOr<DimLines> LinesAlong(const NodeArgs& args, const TensorMeta& t, int64_t dim);

// "[1,2,3]" for messages.
// A kernel that copies the first `bytes` bytes of its first input to its
// first output, in parallel; nothing when a later pass aliased the two.
std::unique_ptr<Kernel> MakeByteCopyKernel(int64_t bytes);

// The op whose output, `shape` of `in`'s dtype, holds its input's bytes
// (a reshape, a flatten, a clone).
PreparedOp CopyAs(const TensorMeta& in, std::vector<int64_t> shape);

// The op whose output, `shape` of `in`'s dtype, is its input read with
// `strides` (in elements) from element `offset` on.
PreparedOp StridedRead(const TensorMeta& in, std::vector<int64_t> shape,
                       const std::vector<int64_t>& strides, int64_t offset);

std::string ShapeString(const std::vector<int64_t>& shape);

// Product of shape[begin, end).
int64_t Product(const std::vector<int64_t>& shape, int begin, int end);

}  // namespace kiln::runtime
