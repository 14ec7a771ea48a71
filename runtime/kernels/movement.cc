// Ops that move elements of any dtype (f32, i64, bool) without computing:
// aten.flip (negative strides), aten.repeat (tiling: stride 0 over each
// repeat), aten.unfold (sliding windows: overlapping strides),
// aten.diagonal (one stride over two dims) and
// aten.index_select (rows picked by an index tensor, copied out of the
// input before it is checked, at run time: an index out of range is
// INVALID_ARGUMENT, as ATen raises).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// out = in read through `plan`, starting `offset` elements into the input.
class StridedGatherKernel final : public Kernel {
 public:
  StridedGatherKernel(StridedPlan plan, int elem_size, int64_t offset)
      : plan_(std::move(plan)), elem_size_(elem_size), offset_(offset) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const char* in = static_cast<const char*>(ctx.inputs[0].data) + offset_ * elem_size_;
    StridedCopy(plan_, elem_size_, in, ctx.outputs[0].data);
    return absl::OkStatus();
  }

 private:
  StridedPlan plan_;
  int elem_size_;
  int64_t offset_;
};

// out[o, j, i] = in[o, index[j], i] for the input seen as [outer, n, inner].
class IndexSelectKernel final : public Kernel {
 public:
  IndexSelectKernel(int64_t outer, int64_t n, int64_t inner, int64_t count, int elem_size,
                    int index_slot)
      : outer_(outer), n_(n), inner_(inner), count_(count), elem_(elem_size),
        index_slot_(index_slot) {}

  // The index is copied here before it is checked: it may lie in a
  // client's shared memory, which can change while the kernel runs.
  size_t ScratchBytes() const override { return count_ * sizeof(int64_t); }

  absl::Status Run(const KernelContext& ctx) const override {
    int64_t* index = static_cast<int64_t*>(ctx.scratch);
    if (count_ > 0) {
      std::memcpy(index, ctx.inputs[index_slot_].data, count_ * sizeof(int64_t));
    }
    for (int64_t j = 0; j < count_; ++j) {
      if (index[j] < 0 || index[j] >= n_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "index_select: index ", index[j], " is out of range for a dim of size ", n_));
      }
    }
    const char* in = static_cast<const char*>(ctx.inputs[0].data);
    char* out = static_cast<char*>(ctx.outputs[0].data);
    const int64_t row = inner_ * elem_;
    // Consecutive indices (an arange: XLNet's relative shift keeps the
    // first half of its last dim) select one run of each outer slice.
    bool consecutive = count_ > 0;
    for (int64_t j = 1; j < count_ && consecutive; ++j) consecutive = index[j] == index[j - 1] + 1;
    if (consecutive) {
      const int64_t run = count_ * row;
      ParallelFor(outer_, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, run)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t o = b; o < e; ++o) {
                      std::memcpy(out + o * run, in + (o * n_ + index[0]) * row, run);
                    }
                  });
      return absl::OkStatus();
    }
    ParallelFor(outer_ * count_, std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, row)),
                [&](int64_t b, int64_t e) {
                  int64_t o = b / count_, j = b % count_;
                  for (int64_t t = b; t < e; ++t) {
                    std::memcpy(out + t * row, in + (o * n_ + index[j]) * row, row);
                    if (++j == count_) {
                      j = 0;
                      ++o;
                    }
                  }
                });
    return absl::OkStatus();
  }

 private:
  int64_t outer_, n_, inner_, count_;
  int64_t elem_;
  int index_slot_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareFlip(const NodeArgs& args) {
  // (self, dims)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.IntList(1, "dims"));
  const int rank = self.rank();
  std::vector<int64_t> strides = ContiguousStrides(self.shape);
  std::vector<bool> flip(rank, false);
  for (int64_t d : dims) {
    KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, rank));
    if (rank == 0) continue;
    if (flip[w]) return args.Error(absl::StrCat("dim ", w, " appears twice in ", ShapeString(dims)));
    flip[w] = true;
  }
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d) {
    if (!flip[d] || self.shape[d] == 0) continue;
    offset += (self.shape[d] - 1) * strides[d];
    strides[d] = -strides[d];
  }
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<StridedGatherKernel>(MakeStridedPlan(self.shape, {strides}),
                                                    static_cast<int>(ElementSize(self.dtype)),
                                                    offset);
  return op;
}

absl::StatusOr<PreparedOp> PrepareRepeat(const NodeArgs& args) {
  // (self, repeats): repeats has at least self's rank; self is padded with
  // leading 1s. The output is walked as [r0, s0, r1, s1, ...] with stride
  // 0 over each repeat.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> repeats, args.IntList(1, "repeats"));
  if (repeats.size() < static_cast<size_t>(self.rank())) {
    return args.Error(absl::StrCat("repeats ", ShapeString(repeats),
                                   " must have at least as many dims as self ", self.ToString()));
  }
  const size_t rank = repeats.size();
  std::vector<int64_t> shape(rank - self.rank(), 1);
  shape.insert(shape.end(), self.shape.begin(), self.shape.end());
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  std::vector<int64_t> walk, walk_strides, out_shape;
  for (size_t d = 0; d < rank; ++d) {
    if (repeats[d] < 0) {
      return args.Error(absl::StrCat("repeats must be non-negative, got ", ShapeString(repeats)));
    }
    walk.push_back(repeats[d]);
    walk_strides.push_back(0);
    walk.push_back(shape[d]);
    walk_strides.push_back(strides[d]);
    out_shape.push_back(repeats[d] * shape[d]);
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, out_shape});
  KILN_RETURN_IF_ERROR(ValidateMeta(op.outputs[0]));
  op.kernel = std::make_unique<StridedGatherKernel>(
      MakeStridedPlan(walk, {walk_strides}), static_cast<int>(ElementSize(self.dtype)), 0);
  return op;
}

absl::StatusOr<PreparedOp> PrepareUnfold(const NodeArgs& args) {
  // (self, dimension, size, step): dim `dimension` becomes the window
  // count, and a last dim of `size` walks each window.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dimension"));
  KILN_ASSIGN_OR_RETURN(int64_t size, args.Int(2, "size"));
  KILN_ASSIGN_OR_RETURN(int64_t step, args.Int(3, "step"));
  const std::vector<int64_t> shape = self.rank() == 0 ? std::vector<int64_t>{1} : self.shape;
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, static_cast<int>(shape.size())));
  if (step <= 0) return args.Error(absl::StrCat("step must be positive, got ", step));
  if (size < 0 || size > shape[dim]) {
    return args.Error(absl::StrCat("size ", size, " must be in [0, ", shape[dim],
                                   "] for dim ", dim, " of ", self.ToString()));
  }
  const std::vector<int64_t> strides = ContiguousStrides(shape);
  std::vector<int64_t> out_shape = shape, walk = strides;
  out_shape[dim] = (shape[dim] - size) / step + 1;
  walk[dim] = strides[dim] * step;
  out_shape.push_back(size);
  walk.push_back(strides[dim]);
  if (self.rank() == 0) {  // a 0-D tensor unfolds into [size]
    out_shape.erase(out_shape.begin());
    walk.erase(walk.begin());
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, out_shape});
  op.kernel = std::make_unique<StridedGatherKernel>(
      MakeStridedPlan(out_shape, {walk}), static_cast<int>(ElementSize(self.dtype)), 0);
  return op;
}

absl::StatusOr<PreparedOp> PrepareDiagonal(const NodeArgs& args) {
  // (self, offset=0, dim1=0, dim2=1): dims dim1 and dim2 go, and a last
  // dim walks their diagonal, `offset` above it (below when negative).
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t offset, args.Int(1, "offset", 0));
  KILN_ASSIGN_OR_RETURN(int64_t d1_arg, args.Int(2, "dim1", 0));
  KILN_ASSIGN_OR_RETURN(int64_t d2_arg, args.Int(3, "dim2", 1));
  if (self.rank() < 2) return args.Error("diagonal needs at least 2 dims");
  KILN_ASSIGN_OR_RETURN(int d1, WrapDim(args, d1_arg, self.rank()));
  KILN_ASSIGN_OR_RETURN(int d2, WrapDim(args, d2_arg, self.rank()));
  if (d1 == d2) return args.Error(absl::StrCat("dim1 and dim2 are both ", d1));
  const std::vector<int64_t> strides = ContiguousStrides(self.shape);
  const int64_t n1 = self.shape[d1], n2 = self.shape[d2];
  const int64_t length = std::max<int64_t>(
      0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  const int64_t start = length == 0 ? 0 : offset >= 0 ? offset * strides[d2] : -offset * strides[d1];
  std::vector<int64_t> out_shape, walk;
  for (int d = 0; d < self.rank(); ++d) {
    if (d == d1 || d == d2) continue;
    out_shape.push_back(self.shape[d]);
    walk.push_back(strides[d]);
  }
  out_shape.push_back(length);
  walk.push_back(strides[d1] + strides[d2]);
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, out_shape});
  op.kernel = std::make_unique<StridedGatherKernel>(
      MakeStridedPlan(out_shape, {walk}), static_cast<int>(ElementSize(self.dtype)), start);
  return op;
}

absl::StatusOr<PreparedOp> PrepareIndexSelect(const NodeArgs& args) {
  // (self, dim, index): index is a 0-D or 1-D i64 tensor.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(TensorMeta index, args.Tensor(2, "index"));
  if (index.dtype != DType::kI64 || index.rank() > 1) {
    return args.Error(absl::StrCat("index must be a 0-D or 1-D i64 tensor, got ",
                                   index.ToString()));
  }
  const int rank = std::max(self.rank(), 1);
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, rank));
  const std::vector<int64_t> shape = self.rank() == 0 ? std::vector<int64_t>{1} : self.shape;
  const int64_t count = index.NumElements();
  std::vector<int64_t> out_shape = self.shape;
  if (self.rank() > 0) out_shape[dim] = count;
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, out_shape});
  if (shape[dim] == 0 && count > 0) {
    return args.Error("index_select from an empty dim");
  }
  op.kernel = std::make_unique<IndexSelectKernel>(
      Product(shape, 0, dim), shape[dim], Product(shape, dim + 1, rank), count,
      static_cast<int>(ElementSize(self.dtype)), InputIndex(args, 2, "index"));
  return op;
}

}  // namespace kiln::runtime
