// Indexing by integer tensors, any element type:
//   aten.gather.default   out[..i_d..] = self[..index[..]..] along one dim;
//   aten.index.Tensor     advanced indexing with i64 index tensors that
//                         broadcast together; the indexed dims must be
//                         adjacent (None elsewhere), as in the models'
//                         attention masks and nearest upsampling.
// Negative indices count from the end; out-of-range indices fail the run
// with INVALID_ARGUMENT. Indices may lie in a client's shared memory, which
// can change at any time: each kernel copies them into scratch once and
// checks and uses only the copy.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/dtype_convert.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

absl::Status IndexOutOfRange(const char* op, int64_t index, int64_t size) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": index ", index, " is out of range for a dimension of size ",
      size));
}

void CopyElement(char* dst, const char* src, int es) {
  std::memcpy(dst, src, es);
}

class GatherKernel final : public Kernel {
 public:
  // self viewed as [outer, size, inner], index/out as [outer, n, inner']
  // with inner' <= inner (gather allows smaller index sizes).
  GatherKernel(std::vector<int64_t> self_shape, std::vector<int64_t> idx_shape,
               int dim, int elem_size, int self_slot, int index_slot, DType index_dtype)
      : index_dtype_(index_dtype),
        self_shape_(std::move(self_shape)),
        idx_shape_(std::move(idx_shape)),
        dim_(dim),
        es_(elem_size),
        self_slot_(self_slot),
        index_slot_(index_slot) {}

  size_t ScratchBytes() const override { return Count() * sizeof(int64_t); }

  absl::Status Run(const KernelContext& ctx) const override {
    const char* self = static_cast<const char*>(ctx.inputs[self_slot_].data);
    const int64_t n = Count();
    int64_t* idx = static_cast<int64_t*>(ctx.scratch);
    // Copied (and widened from i32) out of the input first: client
    // memory is read once, checked and used from the copy.
    if (n > 0) ConvertElements(index_dtype_, ctx.inputs[index_slot_].data, DType::kI64, idx, n);
    char* out = static_cast<char*>(ctx.outputs[0].data);
    const int rank = static_cast<int>(idx_shape_.size());
    const std::vector<int64_t> sstr = ContiguousStrides(self_shape_);
    const int64_t size = self_shape_[dim_];
    for (int64_t i = 0; i < n; ++i) {
      if (idx[i] < -size || idx[i] >= size) {
        return IndexOutOfRange("gather", idx[i], size);
      }
    }
    // Row by row along the last dim: a row's other coordinates are the
    // same for all of it. A row whose indices are all one value (an index
    // expanded over the trailing dims: BigBird's block gathers) is one
    // contiguous run of self, copied whole.
    if (n == 0) return absl::OkStatus();
    const int last = rank - 1;
    const int64_t inner = idx_shape_[last];
    const int64_t rows = n / inner;
    ParallelFor(rows, std::max<int64_t>(1, 4096 / inner), [&](int64_t b, int64_t e) {
      std::vector<int64_t> coord(rank, 0);  // of row b, over the dims before `last`
      for (int64_t rem = b, d = last - 1; d >= 0; --d) {
        coord[d] = rem % idx_shape_[d];
        rem /= idx_shape_[d];
      }
      for (int64_t row = b; row < e; ++row) {
        int64_t base = 0;
        for (int d = 0; d < last; ++d) {
          if (d != dim_) base += coord[d] * sstr[d];
        }
        const int64_t* ir = idx + row * inner;
        char* o = out + row * inner * es_;
        auto at = [&](int64_t j) { return ir[j] < 0 ? ir[j] + size : ir[j]; };
        if (dim_ == last) {
          for (int64_t j = 0; j < inner; ++j) CopyElement(o + j * es_, self + (base + at(j)) * es_, es_);
        } else {
          bool same = true;
          for (int64_t j = 1; j < inner && same; ++j) same = ir[j] == ir[0];
          const char* src = self + (base + at(0) * sstr[dim_]) * es_;
          if (same) {
            std::memcpy(o, src, inner * es_);
          } else {
            for (int64_t j = 0; j < inner; ++j) {
              CopyElement(o + j * es_, self + (base + at(j) * sstr[dim_] + j) * es_, es_);
            }
          }
        }
        for (int d = last - 1; d >= 0; --d) {  // the next row's coordinates
          if (++coord[d] < idx_shape_[d]) break;
          coord[d] = 0;
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  int64_t Count() const {
    int64_t n = 1;
    for (int64_t s : idx_shape_) n *= s;
    return n;
  }

  DType index_dtype_;
  std::vector<int64_t> self_shape_, idx_shape_;
  int dim_;
  int es_;
  int self_slot_, index_slot_;
};

// out[pre, b, post] = self[pre, idx_0[b], ..., idx_k[b], post].
class AdvancedIndexKernel final : public Kernel {
 public:
  struct Config {
    int64_t pre = 1, post = 1, count = 1;  // count = broadcast index numel
    int elem_size = 4;
    int self_slot = 0;
    std::vector<int> index_slots;
    std::vector<StridedPlan> index_plans;  // each index broadcast to [count]
    std::vector<int64_t> dim_sizes;        // sizes of the indexed dims
    std::vector<int64_t> dim_strides;      // their strides in self (elems)
    int64_t pre_stride = 0;                // self elements per `pre` step
  };

  explicit AdvancedIndexKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override {
    // Broadcast copies of each index, then the summed offsets.
    return (c_.index_slots.size() + 1) * c_.count * sizeof(int64_t);
  }

  absl::Status Run(const KernelContext& ctx) const override {
    int64_t* scratch = static_cast<int64_t*>(ctx.scratch);
    int64_t* offsets = scratch + c_.index_slots.size() * c_.count;
    if (c_.count > 0) std::fill(offsets, offsets + c_.count, 0);
    for (size_t k = 0; k < c_.index_slots.size(); ++k) {
      int64_t* expanded = scratch + k * c_.count;
      StridedCopy(c_.index_plans[k], 8, ctx.inputs[c_.index_slots[k]].data,
                  expanded);
      const int64_t size = c_.dim_sizes[k];
      for (int64_t i = 0; i < c_.count; ++i) {
        int64_t v = expanded[i];
        if (v < -size || v >= size) return IndexOutOfRange("index", v, size);
        if (v < 0) v += size;
        offsets[i] += v * c_.dim_strides[k];
      }
    }
    const char* self = static_cast<const char*>(ctx.inputs[c_.self_slot].data);
    char* out = static_cast<char*>(ctx.outputs[0].data);
    const int64_t row = c_.post * c_.elem_size;
    const int64_t rows = c_.pre * c_.count;
    ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(row, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) {
                    const int64_t p = r / c_.count, i = r % c_.count;
                    const char* src =
                        self + (p * c_.pre_stride + offsets[i]) * c_.elem_size;
                    std::memcpy(out + r * row, src, row);
                  }
                });
    return absl::OkStatus();
  }

 private:
  Config c_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareGather(const NodeArgs& args) {
  // (self, dim, index, *, sparse_grad=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(TensorMeta index, args.Tensor(2, "index"));
  // ATen takes i64 or i32 indices (and any dtype for an empty index).
  if (index.dtype != DType::kI32 && index.NumElements() != 0) {
    KILN_RETURN_IF_ERROR(RequireDType(args, index, "index", DType::kI64));
  }
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  PreparedOp op;
  if (index.NumElements() == 0) {  // ATen checks nothing more: an empty result
    op.outputs.push_back(TensorMeta{self.dtype, index.shape});
    op.kernel = std::make_unique<GatherKernel>(std::vector<int64_t>{1}, std::vector<int64_t>{0}, 0,
                                               static_cast<int>(ElementSize(self.dtype)),
                                               InputIndex(args, 0, "self"),
                                               InputIndex(args, 2, "index"), DType::kI64);
    return op;
  }
  const int rank = std::max(self.rank(), 1);
  // A 0-D self takes a 0-D or one-element 1-D index, as in ATen.
  const bool scalar_self = self.rank() == 0 && index.rank() <= 1 && index.NumElements() == 1;
  if (index.rank() != self.rank() && !scalar_self) {
    return args.Error(absl::StrCat("index ", index.ToString(),
                                   " must have the rank of self ",
                                   self.ToString()));
  }
  std::vector<int64_t> self_shape = self.shape, idx_shape = index.shape;
  if (self.rank() == 0) {
    if (!scalar_self) return args.Error("a 0-D self needs one index");
    self_shape = {1};
    idx_shape = {1};
  }
  for (int d = 0; d < rank; ++d) {
    if (d != dim && idx_shape[d] > self_shape[d]) {
      return args.Error(absl::StrCat("index ", index.ToString(),
                                     " is larger than self ", self.ToString(),
                                     " outside dimension ", dim));
    }
  }
  op.outputs.push_back(TensorMeta{self.dtype, index.shape});
  op.kernel = std::make_unique<GatherKernel>(
      self_shape, idx_shape, dim, static_cast<int>(ElementSize(self.dtype)),
      InputIndex(args, 0, "self"), InputIndex(args, 2, "index"), index.dtype);
  return op;
}

absl::StatusOr<PreparedOp> PrepareIndexTensor(const NodeArgs& args) {
  // (self, indices: Tensor?[])
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<std::optional<TensorMeta>> indices,
                        args.OptionalTensorList(1, "indices"));
  if (static_cast<int>(indices.size()) > self.rank()) {
    return args.Error(absl::StrCat("too many indices (", indices.size(),
                                   ") for ", self.ToString()));
  }
  int first = -1, last = -1;
  std::vector<int64_t> bshape;
  AdvancedIndexKernel::Config c;
  c.elem_size = static_cast<int>(ElementSize(self.dtype));
  c.self_slot = InputIndex(args, 0, "self");
  const std::vector<int64_t> strides = ContiguousStrides(self.shape);
  int slot = InputIndex(args, 1, "indices");
  std::vector<TensorMeta> used;
  for (int d = 0; d < static_cast<int>(indices.size()); ++d) {
    if (!indices[d].has_value()) continue;
    const TensorMeta& t = *indices[d];
    if (t.dtype != DType::kI64) {
      return args.Unimplemented(absl::StrCat(
          "index tensors must be i64 (bool masks are not supported), got ",
          t.ToString()));
    }
    if (first >= 0 && last != d - 1) {
      return args.Unimplemented(
          "indexed dimensions separated by a slice are not supported");
    }
    if (first < 0) first = d;
    last = d;
    std::optional<std::vector<int64_t>> b = BroadcastShapes(bshape, t.shape);
    if (!b) {
      return args.Error(absl::StrCat("index shapes do not broadcast: ",
                                     ShapeString(bshape), " and ",
                                     t.ToString()));
    }
    bshape = *b;
    used.push_back(t);
    c.index_slots.push_back(slot++);
    c.dim_sizes.push_back(self.shape[d]);
    c.dim_strides.push_back(strides[d]);
  }
  if (first < 0) return args.Error("index() needs at least one index tensor");
  std::vector<int64_t> shape(self.shape.begin(), self.shape.begin() + first);
  shape.insert(shape.end(), bshape.begin(), bshape.end());
  shape.insert(shape.end(), self.shape.begin() + last + 1, self.shape.end());
  TensorMeta out{self.dtype, shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  c.pre = Product(self.shape, 0, first);
  c.post = Product(self.shape, last + 1, self.rank());
  c.count = 1;
  for (int64_t s : bshape) c.count *= s;
  c.pre_stride = Product(self.shape, first, self.rank());
  for (const TensorMeta& t : used) {
    c.index_plans.push_back(
        MakeStridedPlan(bshape, {BroadcastInputStrides(bshape, t.shape)}));
  }
  PreparedOp op;
  op.outputs.push_back(out);
  op.kernel = std::make_unique<AdvancedIndexKernel>(std::move(c));
  return op;
}

}  // namespace kiln::runtime
