// Joining and splitting along one dim, any dtype: aten.cat.default and
// aten.split_with_sizes.default.
//
// Both view the tensors as [outer, size_along_dim * inner] byte rows: a cat
// writes each input's row into its column range of the output row, a split
// reads each output's column range. Tasks are (outer row, tensor) pairs.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Row bytes of each piece and its byte offset within a joined row.
struct Pieces {
  int64_t outer = 1;
  int64_t joined_row_bytes = 0;
  std::vector<int64_t> row_bytes, offsets;
  // Input slot of each piece (cat); pieces of size 0 are dropped.
  std::vector<int> slots;
};

// Copies `bytes` (a few dozen: a channels-last row's share of channels)
// without a call: memcpy's per-call cost exceeded the copy itself for the
// 56-byte rows of a 14-channel split.
inline void CopyShort(char* dst, const char* src, int64_t bytes) {
  for (; bytes >= 32; bytes -= 32, dst += 32, src += 32) __builtin_memcpy(dst, src, 32);
  if (bytes >= 16) {
    __builtin_memcpy(dst, src, 16);
    dst += 16, src += 16, bytes -= 16;
  }
  if (bytes >= 8) {
    __builtin_memcpy(dst, src, 8);
    dst += 8, src += 8, bytes -= 8;
  }
  if (bytes >= 4) {
    __builtin_memcpy(dst, src, 4);
    dst += 4, src += 4, bytes -= 4;
  }
  for (; bytes > 0; --bytes) *dst++ = *src++;
}

// Row bytes of a piece below which its rows are copied by CopyShort, and
// tasks take whole joined rows (every piece of a row) rather than one
// (row, piece) pair each.
constexpr int64_t kShortRowBytes = 256;

void CopyPieces(const Pieces& p, bool join, const KernelContext& ctx) {
  const int64_t n = static_cast<int64_t>(p.row_bytes.size());
  if (n == 0 || p.outer == 0) return;
  auto ends = [&](int64_t row, int64_t k, char** joined, char** piece) {
    *joined = static_cast<char*>(join ? ctx.outputs[0].data : ctx.inputs[0].data) +
              row * p.joined_row_bytes + p.offsets[k];
    *piece = static_cast<char*>(join ? ctx.inputs[p.slots[k]].data
                                     : ctx.outputs[p.slots[k]].data) +
             row * p.row_bytes[k];
  };
  const int64_t widest = *std::max_element(p.row_bytes.begin(), p.row_bytes.end());
  if (widest < kShortRowBytes) {
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / p.joined_row_bytes);
    ParallelFor(p.outer, grain, [&](int64_t b, int64_t e) {
      for (int64_t k = 0; k < n; ++k) {
        char *joined, *piece;
        ends(b, k, &joined, &piece);
        const int64_t bytes = p.row_bytes[k];
        for (int64_t row = b; row < e; ++row) {
          if (join) {
            CopyShort(joined, piece, bytes);
          } else {
            CopyShort(piece, joined, bytes);
          }
          joined += p.joined_row_bytes;
          piece += bytes;
        }
      }
    });
    return;
  }
  const int64_t avg = std::max<int64_t>(1, p.joined_row_bytes / n);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / avg);
  ParallelFor(p.outer * n, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      char *joined, *piece;
      ends(t / n, t % n, &joined, &piece);
      if (join) {
        std::memcpy(joined, piece, p.row_bytes[t % n]);
      } else {
        std::memcpy(piece, joined, p.row_bytes[t % n]);
      }
    }
  });
}

class CatKernel final : public Kernel {
 public:
  explicit CatKernel(Pieces p) : p_(std::move(p)) {}
  absl::Status Run(const KernelContext& ctx) const override {
    CopyPieces(p_, /*join=*/true, ctx);
    return absl::OkStatus();
  }

 private:
  Pieces p_;
};

class SplitKernel final : public Kernel {
 public:
  explicit SplitKernel(Pieces p) : p_(std::move(p)) {}
  absl::Status Run(const KernelContext& ctx) const override {
    CopyPieces(p_, /*join=*/false, ctx);
    return absl::OkStatus();
  }

 private:
  Pieces p_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareCat(const NodeArgs& args) {
  // (tensors, dim=0)
  KILN_ASSIGN_OR_RETURN(std::vector<TensorMeta> tensors,
                        args.TensorList(0, "tensors"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim", 0));
  const int first = InputIndex(args, 0, "tensors");
  // ATen skips 1-D empty tensors (legacy behaviour: torch.tensor([]) can
  // be concatenated with anything), e.g. an empty KV cache.
  const TensorMeta* ref = nullptr;
  for (const TensorMeta& t : tensors) {
    if (!(t.rank() == 1 && t.shape[0] == 0)) {
      ref = &t;
      break;
    }
  }
  if (tensors.empty()) return args.Error("cat() expects a non-empty list");
  if (ref == nullptr) ref = &tensors[0];
  for (const TensorMeta& t : tensors) {
    if (t.dtype != ref->dtype) {
      return args.Unimplemented(absl::StrCat(
          "cat of mixed dtypes (", ref->ToString(), " and ", t.ToString(),
          ") is not supported"));
    }
  }
  if (ref->rank() == 0) return args.Error("zero-dimensional tensors cannot be concatenated");
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, ref->rank()));
  std::vector<int64_t> out_shape = ref->shape;
  out_shape[dim] = 0;
  const int64_t elem = static_cast<int64_t>(ElementSize(ref->dtype));
  const int64_t inner = Product(ref->shape, dim + 1, ref->rank()) * elem;
  Pieces p;
  p.outer = Product(ref->shape, 0, dim);
  for (int i = 0; i < static_cast<int>(tensors.size()); ++i) {
    const TensorMeta& t = tensors[i];
    if (t.rank() == 1 && t.shape[0] == 0) continue;
    if (t.rank() != ref->rank()) {
      return args.Error(absl::StrCat("tensors must have the same rank: ",
                                     ref->ToString(), " and ", t.ToString()));
    }
    for (int d = 0; d < t.rank(); ++d) {
      if (d != dim && t.shape[d] != ref->shape[d]) {
        return args.Error(absl::StrCat("sizes of tensors must match except ",
                                       "in dimension ", dim, ": ",
                                       ref->ToString(), " and ",
                                       t.ToString()));
      }
    }
    out_shape[dim] += t.shape[dim];
    const int64_t bytes = t.shape[dim] * inner;
    if (bytes == 0) continue;
    p.offsets.push_back(p.joined_row_bytes);
    p.row_bytes.push_back(bytes);
    p.slots.push_back(first + i);
    p.joined_row_bytes += bytes;
  }
  TensorMeta out{ref->dtype, out_shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  PreparedOp op;
  op.outputs.push_back(out);
  op.kernel = std::make_unique<CatKernel>(std::move(p));
  return op;
}

absl::StatusOr<PreparedOp> PrepareSplitWithSizes(const NodeArgs& args) {
  // (self, split_sizes, dim=0) -> Tensor[]
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                        args.IntList(1, "split_sizes"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(2, "dim", 0));
  if (self.rank() == 0) return args.Error("split() needs a tensor with at least one dimension");
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) return args.Error(absl::StrCat("split size ", s, " is negative"));
    total += s;
  }
  if (total != self.shape[dim]) {
    return args.Error(absl::StrCat("split_sizes ", ShapeString(sizes),
                                   " must sum to the size of dimension ", dim,
                                   " of ", self.ToString()));
  }
  const int64_t elem = static_cast<int64_t>(ElementSize(self.dtype));
  const int64_t inner = Product(self.shape, dim + 1, self.rank()) * elem;
  Pieces p;
  p.outer = Product(self.shape, 0, dim);
  p.joined_row_bytes = self.shape[dim] * inner;
  PreparedOp op;
  int64_t offset = 0;
  for (int i = 0; i < static_cast<int>(sizes.size()); ++i) {
    std::vector<int64_t> shape = self.shape;
    shape[dim] = sizes[i];
    op.outputs.push_back(TensorMeta{self.dtype, shape});
    const int64_t bytes = sizes[i] * inner;
    if (bytes > 0) {
      p.offsets.push_back(offset);
      p.row_bytes.push_back(bytes);
      p.slots.push_back(i);
    }
    offset += bytes;
  }
  op.kernel = std::make_unique<SplitKernel>(std::move(p));
  return op;
}

}  // namespace kiln::runtime
