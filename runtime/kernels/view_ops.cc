// Views of any dtype that runtime tensors materialize as copies:
// aten.expand.default, aten.unsqueeze.default, aten.slice.Tensor,
// aten.select.int, aten.alias.default and aten.lift_fresh_copy.default.
//
// Runtime tensors are dense, so each of these writes its own output: a
// memcpy when the bytes are unchanged (unsqueeze, alias), else a strided
// gather over a coalesced plan (strided_loop.h).

#include "absl/strings/str_cat.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

absl::StatusOr<PreparedOp> PrepareExpand(const NodeArgs& args) {
  // (self, size, *, implicit=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(1, "size"));
  const int rank = static_cast<int>(size.size());
  if (rank < self.rank()) {
    return args.Error(absl::StrCat("the number of sizes ", ShapeString(size),
                                   " must be at least the rank of ",
                                   self.ToString()));
  }
  if (rank > kMaxRank) {
    return args.Error(absl::StrCat("rank of ", ShapeString(size),
                                   " exceeds the limit of ", kMaxRank));
  }
  const int lead = rank - self.rank();
  const std::vector<int64_t> in_strides = ContiguousStrides(self.shape);
  std::vector<int64_t> strides(rank, 0);
  for (int d = 0; d < rank; ++d) {
    if (d < lead) {
      if (size[d] < 0) {
        return args.Error(absl::StrCat("size ", size[d], " at new leading ",
                                       "dimension ", d, " is not allowed"));
      }
      continue;
    }
    const int64_t have = self.shape[d - lead];
    if (size[d] == -1) size[d] = have;
    if (size[d] == have) {
      strides[d] = have == 1 ? 0 : in_strides[d - lead];
    } else if (have != 1) {
      return args.Error(absl::StrCat("cannot expand ", self.ToString(),
                                     " to ", ShapeString(size),
                                     ": dimension ", d, " is ", have,
                                     ", not 1"));
    } else if (size[d] < 0) {
      return args.Error(absl::StrCat("invalid size ", size[d], " in ",
                                     ShapeString(size)));
    }
  }
  TensorMeta out{self.dtype, size};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  return StridedRead(self, size, strides, 0);
}

absl::StatusOr<PreparedOp> PrepareUnsqueeze(const NodeArgs& args) {
  // (self, dim)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  if (self.rank() + 1 > kMaxRank) {
    return args.Error(absl::StrCat("unsqueeze of ", self.ToString(),
                                   " exceeds the rank limit of ", kMaxRank));
  }
  // Wraps against rank + 1: -1 appends.
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank() + 1));
  std::vector<int64_t> shape = self.shape;
  shape.insert(shape.begin() + dim, 1);
  return CopyAs(self, std::move(shape));
}

absl::StatusOr<PreparedOp> PrepareAlias(const NodeArgs& args) {
  // (self): alias and lift_fresh_copy both produce the same values.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  return CopyAs(self, self.shape);
}

absl::StatusOr<PreparedOp> PrepareSlice(const NodeArgs& args) {
  // (self, dim=0, start=None, end=None, step=1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (self.rank() == 0) return args.Error("slice() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim", 0));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  const int64_t size = self.shape[dim];
  KILN_ASSIGN_OR_RETURN(int64_t start, args.Int(2, "start", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end, args.Int(3, "end", size));
  KILN_ASSIGN_OR_RETURN(int64_t step, args.Int(4, "step", 1));
  if (step <= 0) return args.Error("slice step must be positive");
  // ATen's clamping: negative bounds count from the end, then both clamp
  // into [0, size] and an end before the start gives an empty slice.
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  const int64_t len = (end - start + step - 1) / step;
  std::vector<int64_t> shape = self.shape;
  shape[dim] = len;
  std::vector<int64_t> strides = ContiguousStrides(self.shape);
  const int64_t offset = start * strides[dim];
  strides[dim] *= step;
  return StridedRead(self, std::move(shape), strides, offset);
}

absl::StatusOr<PreparedOp> PrepareSelect(const NodeArgs& args) {
  // (self, dim, index)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (self.rank() == 0) return args.Error("select() cannot be applied to a 0-dim tensor");
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  KILN_ASSIGN_OR_RETURN(int64_t index, args.Int(2, "index"));
  const int64_t size = self.shape[dim];
  if (index < -size || index >= size) {
    return args.Error(absl::StrCat("index ", index, " is out of range for ",
                                   "dimension ", dim, " of size ", size));
  }
  if (index < 0) index += size;
  std::vector<int64_t> strides = ContiguousStrides(self.shape);
  const int64_t offset = index * strides[dim];
  std::vector<int64_t> shape = self.shape;
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return StridedRead(self, std::move(shape), strides, offset);
}

}  // namespace kiln::runtime
