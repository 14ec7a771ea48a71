// Shape ops on f32, i64 and bool tensors: aten.view / aten.reshape / aten._unsafe_view,
// aten.flatten.using_ints, aten.permute, aten.t, aten.clone,
// aten.squeeze.dim / aten.squeeze.dims, aten.copy.default (src broadcast
// into self's shape) and aten.as_strided(_) (any window of the input's
// elements in row-major order).
//
// Runtime tensors are always dense and contiguous, so every one of these
// writes its own output: views and clones are parallel copies, permute and
// t are strided gathers (tiled when the innermost output dim is not the
// input's innermost, so both sides stay cache friendly; interleaved when
// that dim is short).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Output rows this short whose columns are contiguous runs of the input
// are interleavings rather than transposes: a channel shuffle in NHWC,
// [.., g, C/g] -> [.., C/g, g] with g = 2 in shufflenet. The tiled
// transpose below spent 3 loop levels per 2 floats on them, which made
// shufflenet_v2's channel shuffles a large share of its run.
constexpr int64_t kInterleaveMaxCols = 8;

// dst[r * cols + c] = src[c * cs + r] for r < rows, c < cols.
template <typename T>
void Interleave(const T* src, int64_t cs, int64_t rows, int64_t cols, T* dst) {
  int64_t r = 0;
  if constexpr (std::is_same_v<T, float>) {
   if (cols == 2) {
    const float* a = src;
    const float* b = src + cs;
    for (; r + 8 <= rows; r += 8) {
      const __m256 x = _mm256_loadu_ps(a + r), y = _mm256_loadu_ps(b + r);
      // a0 b0 a1 b1 | a4 b4 a5 b5  and  a2 b2 a3 b3 | a6 b6 a7 b7
      const __m256 lo = _mm256_unpacklo_ps(x, y), hi = _mm256_unpackhi_ps(x, y);
      _mm256_storeu_ps(dst + 2 * r, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_storeu_ps(dst + 2 * r + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
   }
  }
  for (; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = src[c * cs + r];
  }
}

// out (contiguous, shape `shape`) [i] = in[sum idx_d * in_strides[d]], with
// dims coalesced at construction; T is any type of the element's size.
// out (contiguous, out_shape) [idx] = in[offset + sum idx_d * in_strides[d]]:
// permutes, and as_strided's windows (any strides, 0 included), which
// after ComposeViews (passes/compose_views.cc) read whole chains of
// transposes and slices.
template <typename T>
class PermuteKernel final : public Kernel {
 public:
  PermuteKernel(const std::vector<int64_t>& out_shape,
                const std::vector<int64_t>& in_strides, int64_t offset = 0)
      : offset_(offset) {
    // Drop size-1 dims and merge neighbours the input also walks
    // contiguously.
    for (size_t d = 0; d < out_shape.size(); ++d) {
      if (out_shape[d] == 1) continue;
      if (!shape_.empty() && strides_.back() == in_strides[d] * out_shape[d]) {
        shape_.back() *= out_shape[d];
        strides_.back() = in_strides[d];
        continue;
      }
      shape_.push_back(out_shape[d]);
      strides_.push_back(in_strides[d]);
    }
    numel_ = 1;
    for (int64_t s : out_shape) numel_ *= s;
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const T* in = ctx.inputs[0].as<const T>() + offset_;
    T* out = ctx.outputs[0].as<T>();
    if (numel_ == 0) return absl::OkStatus();
    const int nd = static_cast<int>(shape_.size());
    if (nd == 0 || strides_.back() == 1) {
      // Rows of the output are contiguous in the input too.
      const int64_t inner = nd == 0 ? 1 : shape_.back();
      const int64_t rows = numel_ / inner;
      ParallelFor(rows, std::max<int64_t>(1, (int64_t{1} << 15) / inner),
                  [&](int64_t b, int64_t e) {
                    for (int64_t row = b; row < e; ++row) {
                      std::memcpy(out + row * inner,
                                  in + RowOffset(row, nd - 1),
                                  inner * sizeof(T));
                    }
                  });
      return absl::OkStatus();
    }
    if (nd == 1) {  // a strided gather into one row
      const int64_t s = strides_[0];
      ParallelFor(numel_, int64_t{1} << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = in[i * s];
      });
      return absl::OkStatus();
    }
    const int64_t rows = shape_[nd - 2], cols = shape_[nd - 1];
    const int64_t rs = strides_[nd - 2], cs = strides_[nd - 1];
    const int64_t outer = numel_ / (rows * cols);
    if (rs == 1 && cols <= kInterleaveMaxCols) {
      ParallelFor(outer, std::max<int64_t>(1, (int64_t{1} << 14) / (rows * cols)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t o = b; o < e; ++o) {
                      Interleave(in + RowOffset(o, nd - 2), cs, rows, cols,
                                 out + o * rows * cols);
                    }
                  });
      return absl::OkStatus();
    }
    // Tiled transpose of the last two dims for each outer index.
    constexpr int64_t kTile = 32;
    const int64_t row_tiles = (rows + kTile - 1) / kTile;
    ParallelFor(outer * row_tiles, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / row_tiles;
        const int64_t r0 = (t % row_tiles) * kTile;
        const int64_t r1 = std::min(r0 + kTile, rows);
        const T* src = in + RowOffset(o, nd - 2);
        T* dst = out + o * rows * cols;
        for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
          const int64_t c1 = std::min(c0 + kTile, cols);
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = c0; c < c1; ++c) {
              dst[r * cols + c] = src[r * rs + c * cs];
            }
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  // Input offset of index `i` over the first `nd` coalesced dims.
  int64_t RowOffset(int64_t i, int nd) const {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) {
      off += (i % shape_[d]) * strides_[d];
      i /= shape_[d];
    }
    return off;
  }

  std::vector<int64_t> shape_, strides_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;
};

// out = src broadcast to out's shape (any element size).
class BroadcastCopyKernel final : public Kernel {
 public:
  BroadcastCopyKernel(StridedPlan plan, int elem_size, int src_index)
      : plan_(std::move(plan)), elem_size_(elem_size), src_index_(src_index) {}

  absl::Status Run(const KernelContext& ctx) const override {
    StridedCopy(plan_, elem_size_, ctx.inputs[src_index_].data,
                ctx.outputs[0].data);
    return absl::OkStatus();
  }

 private:
  StridedPlan plan_;
  int elem_size_;
  int src_index_;
};

// A PermuteKernel of `in`'s element size reading out_shape through
// in_strides from `offset`.
PreparedOp StridedGather(const TensorMeta& in, const std::vector<int64_t>& out_shape,
                         const std::vector<int64_t>& in_strides, int64_t offset) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{in.dtype, out_shape});
  switch (ElementSize(in.dtype)) {
    case 1:
      op.kernel = std::make_unique<PermuteKernel<uint8_t>>(out_shape, in_strides, offset);
      break;
    case 2:
      op.kernel = std::make_unique<PermuteKernel<uint16_t>>(out_shape, in_strides, offset);
      break;
    case 8:
      op.kernel = std::make_unique<PermuteKernel<uint64_t>>(out_shape, in_strides, offset);
      break;
    default:
      op.kernel = std::make_unique<PermuteKernel<uint32_t>>(out_shape, in_strides, offset);
      break;
  }
  return op;
}

PreparedOp PermuteOp(const TensorMeta& in, const std::vector<int>& dims) {
  const std::vector<int64_t> strides = ContiguousStrides(in.shape);
  std::vector<int64_t> out_shape, in_strides;
  for (int d : dims) {
    out_shape.push_back(in.shape[d]);
    in_strides.push_back(strides[d]);
  }
  return StridedGather(in, out_shape, in_strides, 0);
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareView(const NodeArgs& args) {
  // (self, size) for view, reshape and _unsafe_view, of any element type:
  // the bytes are the same.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(1, "size"));
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(size.size()); ++i) {
    if (size[i] == -1) {
      if (infer >= 0) {
        return args.Error(absl::StrCat("only one dimension can be -1, got ",
                                       ShapeString(size)));
      }
      infer = i;
    } else if (size[i] < 0) {
      return args.Error(
          absl::StrCat("invalid size ", size[i], " in ", ShapeString(size)));
    } else {
      known *= size[i];
      if (known > kMaxElements) {
        return args.Error(
            absl::StrCat("size ", ShapeString(size), " is too large"));
      }
    }
  }
  const int64_t numel = self.NumElements();
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return args.Error(absl::StrCat("shape ", ShapeString(size),
                                     " is invalid for input of size ", numel,
                                     " ", self.ToString()));
    }
    size[infer] = numel / known;
  } else if (known != numel) {
    return args.Error(absl::StrCat("shape ", ShapeString(size),
                                   " is invalid for input of size ", numel,
                                   " ", self.ToString()));
  }
  if (size.size() > static_cast<size_t>(kMaxRank)) {
    return args.Error(absl::StrCat("rank of ", ShapeString(size),
                                   " exceeds the limit of ", kMaxRank));
  }
  return CopyAs(self, std::move(size));
}

absl::StatusOr<PreparedOp> PrepareFlatten(const NodeArgs& args) {
  // (self, start_dim=0, end_dim=-1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t start_arg, args.Int(1, "start_dim", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end_arg, args.Int(2, "end_dim", -1));
  KILN_ASSIGN_OR_RETURN(int start, WrapDim(args, start_arg, self.rank()));
  KILN_ASSIGN_OR_RETURN(int end, WrapDim(args, end_arg, self.rank()));
  if (start > end) {
    return args.Error(absl::StrCat("flatten() has invalid args: start_dim (",
                                   start_arg, ") cannot come after end_dim (",
                                   end_arg, ")"));
  }
  if (self.rank() == 0) return CopyAs(self, {1});
  std::vector<int64_t> shape(self.shape.begin(), self.shape.begin() + start);
  shape.push_back(Product(self.shape, start, end + 1));
  shape.insert(shape.end(), self.shape.begin() + end + 1, self.shape.end());
  return CopyAs(self, std::move(shape));
}

absl::StatusOr<PreparedOp> PreparePermute(const NodeArgs& args) {
  // (self, dims)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims_arg, args.IntList(1, "dims"));
  if (static_cast<int>(dims_arg.size()) != self.rank()) {
    return args.Error(absl::StrCat("dims ", ShapeString(dims_arg),
                                   " must list each of the ", self.rank(),
                                   " dimensions of ", self.ToString()));
  }
  std::vector<int> dims;
  std::vector<bool> seen(self.rank(), false);
  for (int64_t d : dims_arg) {
    KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, self.rank()));
    if (seen[w]) {
      return args.Error(absl::StrCat("dims ", ShapeString(dims_arg),
                                     " repeats dimension ", w));
    }
    seen[w] = true;
    dims.push_back(w);
  }
  return PermuteOp(self, dims);
}

absl::StatusOr<PreparedOp> PrepareT(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  if (self.rank() > 2) {
    return args.Error(absl::StrCat("t() expects a tensor with <= 2 dims, got ",
                                   self.ToString()));
  }
  if (self.rank() < 2) return CopyAs(self, self.shape);
  return PermuteOp(self, {1, 0});
}

absl::StatusOr<PreparedOp> PrepareClone(const NodeArgs& args) {
  // (self, *, memory_format=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  if (const Arg* mf = args.Find(1, "memory_format")) {
    if (mf->kind != Arg::Kind::kMemoryFormat) {
      return args.Error("memory_format must be a memory format");
    }
    // kiln.v1.MemoryFormat: 0 unspecified, 1 contiguous, 2 channels_last,
    // 3 preserve. Every tensor here is dense in logical order and the
    // client lays each output out with eager's strides, so any format is
    // a copy of the values.
    if (mf->i < 0 || mf->i > 3) {
      return args.Error(absl::StrCat("memory_format ", mf->i, " is not a memory format"));
    }
  }
  return CopyAs(self, self.shape);
}

absl::StatusOr<PreparedOp> PrepareSqueezeDims(const NodeArgs& args) {
  // squeeze.dims (self, dim: int[]) and squeeze.dim (self, dim: int): drops
  // the listed dims that have size 1; others are left alone, as in ATen.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.IntList(1, "dim"));
  std::vector<bool> drop(self.rank(), false);
  for (int64_t d : dims) {
    KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, self.rank()));
    if (self.rank() > 0 && self.shape[w] == 1) drop[w] = true;
  }
  std::vector<int64_t> shape;
  for (int d = 0; d < self.rank(); ++d) {
    if (!drop[d]) shape.push_back(self.shape[d]);
  }
  return CopyAs(self, std::move(shape));
}

absl::StatusOr<PreparedOp> PrepareCopy(const NodeArgs& args) {
  // (self, src, non_blocking=False): self's shape filled from src, which
  // must broadcast to it.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta src, args.Tensor(1, "src"));
  if (src.dtype != self.dtype) {
    return args.Unimplemented(absl::StrCat("copy from ", src.ToString(), " into ",
                                           self.ToString(), " (a conversion) is not supported"));
  }
  bool ok = src.rank() <= self.rank();
  for (int i = 1; ok && i <= src.rank(); ++i) {
    const int64_t s = src.shape[src.rank() - i];
    ok = s == 1 || s == self.shape[self.rank() - i];
  }
  if (!ok) {
    return args.Error(absl::StrCat("src ", src.ToString(),
                                   " does not broadcast to self ",
                                   self.ToString()));
  }
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<BroadcastCopyKernel>(
      MakeStridedPlan(self.shape, {BroadcastInputStrides(self.shape, src.shape)}),
      static_cast<int>(ElementSize(self.dtype)), InputIndex(args, 1, "src"));
  return op;
}

absl::StatusOr<PreparedOp> PrepareAsStrided(const NodeArgs& args) {
  // (self, size, stride, storage_offset=None), over self's elements in
  // row-major order. Runtime tensors are dense; the client sends
  // as_strided only when eager's input is dense too (contiguous, offset 0,
  // its storage exactly its elements: partition.py), so both read the same
  // elements. Every element read must lie within self.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(1, "size"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> stride, args.IntList(2, "stride"));
  KILN_ASSIGN_OR_RETURN(int64_t offset, args.Int(3, "storage_offset", 0));
  if (size.size() != stride.size()) {
    return args.Error(absl::StrCat("size ", ShapeString(size), " and stride ",
                                   ShapeString(stride),
                                   " must have the same length"));
  }
  if (size.size() > static_cast<size_t>(kMaxRank)) {
    return args.Error(absl::StrCat("rank of ", ShapeString(size), " exceeds the limit of ",
                                   kMaxRank));
  }
  bool empty = false;
  int64_t last = offset;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] < 0 || stride[d] < 0) {
      return args.Error(absl::StrCat("size ", ShapeString(size), " and stride ",
                                     ShapeString(stride), " must be non-negative"));
    }
    if (size[d] == 0) empty = true;
    if (size[d] > 0) last += (size[d] - 1) * stride[d];
  }
  if (offset < 0 || (!empty && last >= self.NumElements())) {
    return args.Error(absl::StrCat("as_strided with size ", ShapeString(size), ", stride ",
                                   ShapeString(stride), " and offset ", offset,
                                   " reads past the ", self.NumElements(), " elements of ",
                                   self.ToString()));
  }
  KILN_RETURN_IF_ERROR(ValidateMeta(TensorMeta{self.dtype, size}));
  bool identity = size == self.shape && offset == 0;
  const std::vector<int64_t> contiguous = ContiguousStrides(size);
  for (size_t d = 0; identity && d < size.size(); ++d) {
    identity = size[d] == 1 || stride[d] == contiguous[d];
  }
  if (identity) return CopyAs(self, self.shape);
  // Tiled where the output's rows run across the input (a transpose).
  return StridedGather(self, size, stride, offset);
}

}  // namespace kiln::runtime
