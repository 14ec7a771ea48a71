// Writing through integer indices, f32 / i64 / bool:
//   aten.scatter.src / .value   out = self; out[..index[p]..] = src[p] (or a number)
//   aten.scatter_add.default    ... += src[p]
//   aten.scatter_reduce.two     ... reduced by sum, prod, mean, amax or amin,
//                               with or without self's value (include_self)
//   aten.scatter.reduce / .value_reduce   ... add or multiply
//   aten.index_reduce.default   slices of self along dim reduced with slices of source
//   aten.index_put.default      out = self; out[indices] = values (or +=, accumulate),
//                               also with one bool mask and a single value
// which index_add, index_copy, index_fill and max_unpool decompose into.
//
// Where two index entries name one element, assignment keeps the last in
// index order (as ATen's CPU kernel does) and reductions combine all, in
// index order. Out-of-range indices fail the run with INVALID_ARGUMENT;
// negative ones count from the end (index_put) or are out of range
// (scatter), as in ATen. Indices may lie in a client's shared memory: each
// kernel copies them into scratch once and uses only the copy.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/broadcast.h"
#include "runtime/kernels/element_nan.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

enum class Reduce { kAssign, kSum, kProd, kMean, kMax, kMin };

// dst combined with v; a NaN wins amax and amin (ATen's scatter_reduce).
template <typename T>
T Combine(Reduce r, T dst, T v) {
  switch (r) {
    case Reduce::kAssign:
      return v;
    case Reduce::kSum:
    case Reduce::kMean:
      if constexpr (std::is_same_v<T, bool>) {
        return dst || v;
      } else {
        return static_cast<T>(dst + v);
      }
    case Reduce::kProd:
      if constexpr (std::is_same_v<T, bool>) {
        return dst && v;
      } else {
        return static_cast<T>(dst * v);
      }
    case Reduce::kMax:
      if (IsNan(dst) || IsNan(v)) return IsNan(dst) ? dst : v;
      return v > dst ? v : dst;
    case Reduce::kMin:
      if (IsNan(dst) || IsNan(v)) return IsNan(dst) ? dst : v;
      return v < dst ? v : dst;
  }
  return v;
}

// sum / count for mean: floor division for integers, as ATen.
template <typename T>
T Average(T sum, int64_t count) {
  if constexpr (std::is_floating_point_v<T>) {
    return sum / static_cast<T>(count);
  } else if constexpr (std::is_same_v<T, bool>) {
    return sum;
  } else {
    T q = sum / count;
    if ((sum % count != 0) && (sum < 0)) --q;
    return q;
  }
}

absl::Status OutOfRange(const char* op, int64_t index, int64_t size) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": index ", index, " is out of range for a dimension of size ", size));
}

// self, index and src dense; index no larger than self (outside `dim`) or
// src (anywhere); src absent for a number.
template <typename T>
class ScatterKernel final : public Kernel {
 public:
  struct Config {
    std::vector<int64_t> self_shape, idx_shape, src_shape;
    int dim = 0;
    Reduce reduce = Reduce::kAssign;
    bool include_self = true;
    T value{};
    int self_slot = 0, index_slot = 1, src_slot = -1;
    // index_reduce: a 1-D index of src.shape[dim] entries, one per slice of
    // src along dim (idx_shape is then src's shape).
    bool index_1d = false;
  };
  explicit ScatterKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override {
    return (IndexEntries() + (NeedsCounts() ? Numel(c_.self_shape) : 0)) * sizeof(int64_t);
  }

  absl::Status Run(const KernelContext& ctx) const override {
    const int64_t n = Count(), numel = Numel(c_.self_shape), entries = IndexEntries();
    int64_t* idx = static_cast<int64_t*>(ctx.scratch);
    if (entries > 0) std::memcpy(idx, ctx.inputs[c_.index_slot].data, entries * sizeof(int64_t));
    const int64_t size = c_.self_shape[c_.dim];
    for (int64_t i = 0; i < entries; ++i) {
      if (idx[i] < 0 || idx[i] >= size) return OutOfRange("scatter", idx[i], size);
    }
    T* out = ctx.outputs[0].template as<T>();
    // Planned in place (ops.def: Overwrites), out is self already.
    if (numel > 0 && out != ctx.inputs[c_.self_slot].data) {
      std::memcpy(out, ctx.inputs[c_.self_slot].data, numel * sizeof(T));
    }
    const T* src = c_.src_slot >= 0 ? ctx.inputs[c_.src_slot].template as<const T>() : nullptr;
    int64_t* counts = NeedsCounts() ? idx + entries : nullptr;
    if (counts != nullptr) std::fill(counts, counts + numel, 0);
    const std::vector<int64_t> ostr = ContiguousStrides(c_.self_shape);
    const std::vector<int64_t> sstr = ContiguousStrides(c_.src_shape);
    const int rank = static_cast<int>(c_.idx_shape.size());
    // One thread: entries naming one element combine in index order.
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = 0, soff = 0;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t coord = rem % c_.idx_shape[d];
        rem /= c_.idx_shape[d];
        off += (d == c_.dim ? idx[c_.index_1d ? coord : i] : coord) * ostr[d];
        if (src != nullptr) soff += coord * sstr[d];
      }
      const T v = src != nullptr ? src[soff] : c_.value;
      if (counts != nullptr) {
        out[off] = (counts[off] == 0 && !c_.include_self) ? v : Combine(c_.reduce, out[off], v);
        ++counts[off];
      } else {
        out[off] = Combine(c_.reduce, out[off], v);
      }
    }
    if (c_.reduce == Reduce::kMean) {
      for (int64_t j = 0; j < numel; ++j) {
        if (counts[j] > 0) out[j] = Average(out[j], counts[j] + (c_.include_self ? 1 : 0));
      }
    }
    return absl::OkStatus();
  }

 private:
  bool NeedsCounts() const { return c_.reduce == Reduce::kMean || !c_.include_self; }
  static int64_t Numel(const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t v : s) n *= v;
    return n;
  }
  int64_t Count() const { return Numel(c_.idx_shape); }
  int64_t IndexEntries() const {
    return c_.index_1d ? (Count() == 0 ? 0 : c_.idx_shape[c_.dim]) : Count();
  }

  Config c_;
};

absl::Status RequireScatterable(const NodeArgs& args, const TensorMeta& t, const char* what) {
  if (t.dtype == DType::kF32 || t.dtype == DType::kI64 || t.dtype == DType::kBool) {
    return absl::OkStatus();
  }
  return args.Error(absl::StrCat(what, " must be f32, i64 or bool, got ", t.ToString()));
}

template <typename T>
std::unique_ptr<Kernel> MakeScatter(typename ScatterKernel<T>::Config c) {
  return std::make_unique<ScatterKernel<T>>(std::move(c));
}

// (self, dim, index, src | value, ...) with the given reduction.
absl::StatusOr<PreparedOp> PrepareScatterCommon(const NodeArgs& args, Reduce reduce,
                                                bool include_self, bool src_is_tensor) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireScatterable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(TensorMeta index, args.Tensor(2, "index"));
  KILN_RETURN_IF_ERROR(RequireDType(args, index, "index", DType::kI64));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  const int rank = std::max(self.rank(), 1);
  auto as_rank1 = [](std::vector<int64_t> s) {
    return s.empty() ? std::vector<int64_t>{1} : s;
  };
  if (index.rank() != self.rank() && index.NumElements() > 0) {
    return args.Error(absl::StrCat("index ", index.ToString(), " must have the rank of self ",
                                   self.ToString()));
  }
  std::vector<int64_t> self_shape = as_rank1(self.shape);
  std::vector<int64_t> idx_shape = index.NumElements() == 0 ? std::vector<int64_t>(rank, 0)
                                                            : as_rank1(index.shape);
  std::vector<int64_t> src_shape;
  int src_slot = -1;
  double value = 0;
  int64_t int_value = 0;  // an i64 self's number, read exactly (not through a double)
  if (src_is_tensor) {
    KILN_ASSIGN_OR_RETURN(TensorMeta src, args.Tensor(3, "src"));
    if (src.dtype != self.dtype) {
      return args.Error(absl::StrCat("src ", src.ToString(), " must have self's dtype ",
                                     self.ToString()));
    }
    if (src.rank() != self.rank() && index.NumElements() > 0) {
      return args.Error(absl::StrCat("src ", src.ToString(), " must have the rank of self"));
    }
    src_shape = as_rank1(src.shape);
    src_slot = InputIndex(args, 3, "src");
  } else if (self.dtype == DType::kI64) {
    KILN_ASSIGN_OR_RETURN(int_value, args.Int(3, "value"));
  } else {
    KILN_ASSIGN_OR_RETURN(value, args.Float(3, "value"));
  }
  if (index.NumElements() > 0) {
    for (int d = 0; d < rank; ++d) {
      if (d != dim && idx_shape[d] > self_shape[d]) {
        return args.Error(absl::StrCat("index ", index.ToString(), " is larger than self ",
                                       self.ToString(), " outside dimension ", dim));
      }
      if (src_is_tensor && idx_shape[d] > src_shape[d]) {
        return args.Error(absl::StrCat("index ", index.ToString(), " is larger than src"));
      }
    }
  }
  PreparedOp op;
  op.outputs.push_back(self);
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    typename ScatterKernel<T>::Config c;
    c.self_shape = self_shape;
    c.idx_shape = idx_shape;
    c.src_shape = src_shape;
    c.dim = dim;
    c.reduce = reduce;
    c.include_self = include_self;
    if constexpr (std::is_same_v<T, int64_t>) {
      c.value = int_value;
    } else {
      c.value = static_cast<T>(value);
    }
    c.self_slot = InputIndex(args, 0, "self");
    c.index_slot = InputIndex(args, 2, "index");
    c.src_slot = src_slot;
    return MakeScatter<T>(std::move(c));
  };
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = fill(float{});
      break;
    case DType::kI64:
      op.kernel = fill(int64_t{});
      break;
    default:
      op.kernel = fill(bool{});
      break;
  }
  return op;
}

// out = self; out[pre, idx_0[i], ..., idx_k[i], post] (op)= values[pre, i, post]
// with the indexed dims adjacent, as aten.index.Tensor's kernel (index.cc).
template <typename T>
class IndexPutKernel final : public Kernel {
 public:
  struct Config {
    int64_t pre = 1, post = 1, count = 1, numel = 0;
    int64_t pre_stride = 0;
    bool accumulate = false;
    int self_slot = 0, values_slot = 0;
    std::vector<int> index_slots;
    std::vector<StridedPlan> index_plans;  // each index broadcast to [count]
    std::vector<int64_t> dim_sizes, dim_strides;
    StridedPlan values_plan;  // values broadcast to [pre, count, post]
  };
  explicit IndexPutKernel(Config c) : c_(std::move(c)) {}

  size_t ScratchBytes() const override {
    return (c_.index_slots.size() + 1) * c_.count * sizeof(int64_t) +
           c_.pre * c_.count * c_.post * sizeof(T);
  }

  absl::Status Run(const KernelContext& ctx) const override {
    int64_t* scratch = static_cast<int64_t*>(ctx.scratch);
    int64_t* offsets = scratch + c_.index_slots.size() * c_.count;
    T* values = reinterpret_cast<T*>(offsets + c_.count);
    std::fill(offsets, offsets + c_.count, 0);
    for (size_t k = 0; k < c_.index_slots.size(); ++k) {
      int64_t* expanded = scratch + k * c_.count;
      StridedCopy(c_.index_plans[k], 8, ctx.inputs[c_.index_slots[k]].data, expanded);
      const int64_t size = c_.dim_sizes[k];
      for (int64_t i = 0; i < c_.count; ++i) {
        int64_t v = expanded[i];
        if (v < -size || v >= size) return OutOfRange("index_put", v, size);
        if (v < 0) v += size;
        offsets[i] += v * c_.dim_strides[k];
      }
    }
    StridedCopy(c_.values_plan, sizeof(T), ctx.inputs[c_.values_slot].data, values);
    T* out = ctx.outputs[0].template as<T>();
    if (c_.numel > 0 && out != ctx.inputs[c_.self_slot].data) {  // else in place
      std::memcpy(out, ctx.inputs[c_.self_slot].data, c_.numel * sizeof(T));
    }
    const int64_t post = c_.post;
    // Rows of different `pre` never meet: parallel over pre, index order within.
    ParallelFor(c_.pre, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        for (int64_t i = 0; i < c_.count; ++i) {
          T* dst = out + p * c_.pre_stride + offsets[i];
          const T* src = values + (p * c_.count + i) * post;
          if (c_.accumulate) {
            for (int64_t j = 0; j < post; ++j) dst[j] = Combine(Reduce::kSum, dst[j], src[j]);
          } else {
            std::memcpy(dst, src, post * sizeof(T));
          }
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  Config c_;
};

// index_put with one bool mask over dims [first, first + mask rank) and a
// single value: out = self, with the value written (or added) wherever the
// mask is set. The mask is copied into scratch before it is read.
template <typename T>
class MaskedPutKernel final : public Kernel {
 public:
  MaskedPutKernel(int64_t pre, int64_t count, int64_t post, bool accumulate, int self_slot,
                  int mask_slot, int values_slot)
      : pre_(pre), count_(count), post_(post), accumulate_(accumulate), self_slot_(self_slot),
        mask_slot_(mask_slot), values_slot_(values_slot) {}

  size_t ScratchBytes() const override { return static_cast<size_t>(count_); }

  absl::Status Run(const KernelContext& ctx) const override {
    uint8_t* mask = static_cast<uint8_t*>(ctx.scratch);
    if (count_ > 0) std::memcpy(mask, ctx.inputs[mask_slot_].data, count_);
    T value;
    std::memcpy(&value, ctx.inputs[values_slot_].data, sizeof(T));
    T* out = ctx.outputs[0].template as<T>();
    const int64_t numel = pre_ * count_ * post_;
    if (numel > 0 && out != ctx.inputs[self_slot_].data) {  // else in place
      std::memcpy(out, ctx.inputs[self_slot_].data, numel * sizeof(T));
    }
    ParallelFor(pre_ * count_, std::max<int64_t>(1, 4096 / std::max<int64_t>(post_, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) {
                    if (mask[r % count_] == 0) continue;
                    T* row = out + r * post_;
                    for (int64_t q = 0; q < post_; ++q) {
                      row[q] = accumulate_ ? Combine(Reduce::kSum, row[q], value) : value;
                    }
                  }
                });
    return absl::OkStatus();
  }

 private:
  int64_t pre_, count_, post_;
  bool accumulate_;
  int self_slot_, mask_slot_, values_slot_;
};

// The `reduce` argument (position 4) of scatter_reduce (with "sum") and
// index_reduce (without).
absl::StatusOr<Reduce> ReadReduction(const NodeArgs& args, bool with_sum) {
  const Arg* r = args.Find(4, "reduce");
  if (r == nullptr || r->kind != Arg::Kind::kString) return args.Error("reduce must be a string");
  if (with_sum && r->s == "sum") return Reduce::kSum;
  if (r->s == "prod") return Reduce::kProd;
  if (r->s == "mean") return Reduce::kMean;
  if (r->s == "amax") return Reduce::kMax;
  if (r->s == "amin") return Reduce::kMin;
  return args.Error(absl::StrCat("reduce must be ", with_sum ? "sum, " : "",
                                 "prod, mean, amax or amin, got '", r->s, "'"));
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareScatterSrc(const NodeArgs& args) {
  // (self, dim, index, src)
  return PrepareScatterCommon(args, Reduce::kAssign, true, true);
}

absl::StatusOr<PreparedOp> PrepareScatterValue(const NodeArgs& args) {
  // (self, dim, index, value: Scalar)
  return PrepareScatterCommon(args, Reduce::kAssign, true, false);
}

absl::StatusOr<PreparedOp> PrepareScatterAdd(const NodeArgs& args) {
  // (self, dim, index, src)
  return PrepareScatterCommon(args, Reduce::kSum, true, true);
}

absl::StatusOr<PreparedOp> PrepareScatterReduceTwo(const NodeArgs& args) {
  // (self, dim, index, src, reduce: str, *, include_self=True)
  KILN_ASSIGN_OR_RETURN(Reduce reduce, ReadReduction(args, /*with_sum=*/true));
  KILN_ASSIGN_OR_RETURN(bool include_self, args.Bool(5, "include_self", true));
  return PrepareScatterCommon(args, reduce, include_self, true);
}

absl::StatusOr<PreparedOp> PrepareIndexPut(const NodeArgs& args) {
  // (self, indices: Tensor?[], values, accumulate=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireScatterable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<std::optional<TensorMeta>> indices,
                        args.OptionalTensorList(1, "indices"));
  KILN_ASSIGN_OR_RETURN(TensorMeta values, args.Tensor(2, "values"));
  KILN_ASSIGN_OR_RETURN(bool accumulate, args.Bool(3, "accumulate", false));
  if (values.dtype != self.dtype) {
    return args.Error(absl::StrCat("values ", values.ToString(), " must have self's dtype ",
                                   self.ToString()));
  }
  if (static_cast<int>(indices.size()) > self.rank()) {
    return args.Error(absl::StrCat("too many indices (", indices.size(), ") for ",
                                   self.ToString()));
  }
  // x[mask] = v: one bool mask, one value (a data-dependent count of
  // values has no static shape and stays in eager).
  int tensors = 0, mask_dim = -1;
  for (int d = 0; d < static_cast<int>(indices.size()); ++d) {
    if (!indices[d].has_value()) continue;
    ++tensors;
    if (indices[d]->dtype == DType::kBool) mask_dim = d;
  }
  if (mask_dim >= 0 && tensors == 1 && values.NumElements() == 1) {
    const TensorMeta& mask = *indices[mask_dim];
    const int end = mask_dim + mask.rank();
    if (end > self.rank() ||
        !std::equal(mask.shape.begin(), mask.shape.end(), self.shape.begin() + mask_dim)) {
      return args.Error(absl::StrCat("mask ", mask.ToString(), " does not match ",
                                     self.ToString(), " from dim ", mask_dim));
    }
    const int64_t pre = Product(self.shape, 0, mask_dim), count = mask.NumElements(),
                  post = Product(self.shape, end, self.rank());
    const int self_slot = InputIndex(args, 0, "self"), mask_slot = InputIndex(args, 1, "indices"),
              values_slot = InputIndex(args, 2, "values");
    PreparedOp op;
    op.outputs.push_back(self);
    switch (self.dtype) {
      case DType::kF32:
        op.kernel = std::make_unique<MaskedPutKernel<float>>(pre, count, post, accumulate,
                                                             self_slot, mask_slot, values_slot);
        break;
      case DType::kI64:
        op.kernel = std::make_unique<MaskedPutKernel<int64_t>>(pre, count, post, accumulate,
                                                               self_slot, mask_slot, values_slot);
        break;
      default:
        op.kernel = std::make_unique<MaskedPutKernel<bool>>(pre, count, post, accumulate,
                                                            self_slot, mask_slot, values_slot);
        break;
    }
    return op;
  }
  const std::vector<int64_t> strides = ContiguousStrides(self.shape);
  int first = -1, last = -1;
  std::vector<int64_t> bshape;
  std::vector<TensorMeta> used;
  auto fill = [&](auto tag) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    using T = decltype(tag);
    typename IndexPutKernel<T>::Config c;
    c.accumulate = accumulate;
    c.self_slot = InputIndex(args, 0, "self");
    int slot = InputIndex(args, 1, "indices");
    for (int d = 0; d < static_cast<int>(indices.size()); ++d) {
      if (!indices[d].has_value()) continue;
      const TensorMeta& t = *indices[d];
      if (t.dtype != DType::kI64) {
        return args.Unimplemented(absl::StrCat(
            "index tensors must be i64 (bool masks are not supported), got ", t.ToString()));
      }
      if (first >= 0 && last != d - 1) {
        return args.Unimplemented("indexed dimensions separated by a slice are not supported");
      }
      if (first < 0) first = d;
      last = d;
      std::optional<std::vector<int64_t>> b = BroadcastShapes(bshape, t.shape);
      if (!b) {
        return args.Error(absl::StrCat("index shapes do not broadcast: ", ShapeString(bshape),
                                       " and ", t.ToString()));
      }
      bshape = *b;
      used.push_back(t);
      c.index_slots.push_back(slot++);
      c.dim_sizes.push_back(self.shape[d]);
      c.dim_strides.push_back(strides[d]);
    }
    if (first < 0) return args.Unimplemented("index_put without an index tensor");
    c.values_slot = InputIndex(args, 2, "values");
    std::vector<int64_t> target(self.shape.begin(), self.shape.begin() + first);
    target.insert(target.end(), bshape.begin(), bshape.end());
    target.insert(target.end(), self.shape.begin() + last + 1, self.shape.end());
    std::optional<std::vector<int64_t>> vb = BroadcastShapes(target, values.shape);
    if (!vb || *vb != target) {
      return args.Error(absl::StrCat("values ", values.ToString(),
                                     " do not broadcast to the indexed shape ",
                                     ShapeString(target)));
    }
    c.pre = Product(self.shape, 0, first);
    c.post = Product(self.shape, last + 1, self.rank());
    c.count = 1;
    for (int64_t s : bshape) c.count *= s;
    c.numel = self.NumElements();
    c.pre_stride = Product(self.shape, first, self.rank());
    for (const TensorMeta& t : used) {
      c.index_plans.push_back(MakeStridedPlan(bshape, {BroadcastInputStrides(bshape, t.shape)}));
    }
    c.values_plan = MakeStridedPlan(target, {BroadcastInputStrides(target, values.shape)});
    return std::unique_ptr<Kernel>(std::make_unique<IndexPutKernel<T>>(std::move(c)));
  };
  PreparedOp op;
  op.outputs.push_back(self);
  switch (self.dtype) {
    case DType::kF32: {
      KILN_ASSIGN_OR_RETURN(op.kernel, fill(float{}));
      break;
    }
    case DType::kI64: {
      KILN_ASSIGN_OR_RETURN(op.kernel, fill(int64_t{}));
      break;
    }
    default: {
      KILN_ASSIGN_OR_RETURN(op.kernel, fill(bool{}));
      break;
    }
  }
  return op;
}

absl::StatusOr<PreparedOp> PrepareScatterReduce(const NodeArgs& args) {
  // scatter.reduce (self, dim, index, src, *, reduce) and scatter.value_reduce
  // (self, dim, index, value, *, reduce): reduce is "add" or "multiply".
  const Arg* r = args.Find(4, "reduce");
  if (r == nullptr || r->kind != Arg::Kind::kString) return args.Error("reduce must be a string");
  if (r->s != "add" && r->s != "multiply") {
    return args.Error(absl::StrCat("reduce must be 'add' or 'multiply', got '", r->s, "'"));
  }
  const Arg* src = args.Find(3, "src");
  const bool src_is_tensor = src != nullptr && src->kind == Arg::Kind::kTensor;
  return PrepareScatterCommon(args, r->s == "add" ? Reduce::kSum : Reduce::kProd, true,
                              src_is_tensor);
}

absl::StatusOr<PreparedOp> PrepareIndexReduce(const NodeArgs& args) {
  // (self, dim, index, source, reduce, *, include_self=True): for each i,
  // the slice index[i] of self along dim is reduced with slice i of source.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireScatterable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(TensorMeta index, args.Tensor(2, "index"));
  KILN_RETURN_IF_ERROR(RequireDType(args, index, "index", DType::kI64));
  KILN_ASSIGN_OR_RETURN(TensorMeta source, args.Tensor(3, "source"));
  KILN_ASSIGN_OR_RETURN(Reduce reduce, ReadReduction(args, /*with_sum=*/false));
  KILN_ASSIGN_OR_RETURN(bool include_self, args.Bool(5, "include_self", true));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  // A 0-D self and source are one-element vectors (ATen's view of them).
  if (self.rank() == 0 && source.rank() == 0) {
    self.shape = {1};
    source.shape = {1};
  }
  if (source.dtype != self.dtype || source.rank() != self.rank()) {
    return args.Error(absl::StrCat("source ", source.ToString(), " must have the dtype and rank of self ",
                                   self.ToString()));
  }
  for (int d = 0; d < self.rank(); ++d) {
    if (d != dim && source.shape[d] != self.shape[d]) {
      return args.Error(absl::StrCat("source ", source.ToString(), " must match self ",
                                     self.ToString(), " outside dim ", dim));
    }
  }
  if (index.rank() > 1 || index.NumElements() != source.shape[dim]) {
    return args.Error(absl::StrCat("index ", index.ToString(), " must be 1-D with one entry per slice of source"));
  }
  KILN_ASSIGN_OR_RETURN(TensorMeta out, args.Tensor(0, "self"));
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    typename ScatterKernel<T>::Config c;
    c.self_shape = self.shape;
    c.idx_shape = source.shape;
    c.src_shape = source.shape;
    c.dim = dim;
    c.reduce = reduce;
    c.include_self = include_self;
    c.index_1d = true;
    c.self_slot = InputIndex(args, 0, "self");
    c.index_slot = InputIndex(args, 2, "index");
    c.src_slot = InputIndex(args, 3, "source");
    return MakeScatter<T>(std::move(c));
  };
  PreparedOp op;
  op.outputs.push_back(out);
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = fill(float{});
      break;
    case DType::kI64:
      op.kernel = fill(int64_t{});
      break;
    default:
      op.kernel = fill(bool{});
      break;
  }
  return op;
}

}  // namespace kiln::runtime
