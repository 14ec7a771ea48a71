// Reductions: aten.mean.dim and aten.sum.dim_IntList over f32 tensors (any
// set of dims, negative dims, keepdim; dim None or [] reduces everything;
// integer sums are reduce_general.cc's) and aten.any.dim over
// one dim of a bool or f32 tensor (NaN counts as true), giving bool.
//
// The input's dims are grouped into runs of kept and reduced dims. The two
// common layouts get loops that vectorize: reduced dims innermost (row
// sums, e.g. global average pooling over H, W) and one reduced run between
// kept runs (column sums). Anything else walks the reduced index space per
// output element. The two common layouts add in float, 8 lanes (or a
// block of channels) wide so the loops vectorize, and move the partial
// sums into double accumulators every few dozen elements, so long
// reductions keep float precision.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

// Float partial sums cover at most this many inputs each before they are
// added into double: each lane of SumContiguous and each channel of
// SumColumns adds up to kFlushRows floats, whose rounding error stays
// near float epsilon times sqrt(kFlushRows) of the partial sum.
constexpr int64_t kFlushRows = 32;
constexpr int kLanes = 8;

// Sum of n contiguous floats.
double SumContiguous(const float* x, int64_t n) {
  double total = 0.0;
  constexpr int64_t kBlock = kFlushRows * kLanes;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float lanes[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l];
    }
    double part = 0.0;
    for (int l = 0; l < kLanes; ++l) part += lanes[l];
    for (; i < e; ++i) part += x[i];
    total += part;
  }
  return total;
}

// acc[j] += sum over r < rows of x[r * stride + j], for j < len <= kMaxColumns.
constexpr int64_t kMaxColumns = 64;
void SumColumns(const float* x, int64_t rows, int64_t stride, int64_t len, double* acc) {
  float part[kMaxColumns];
  for (int64_t r0 = 0; r0 < rows; r0 += kFlushRows) {
    const int64_t r1 = std::min(rows, r0 + kFlushRows);
    std::fill(part, part + len, 0.f);
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * stride;
      for (int64_t j = 0; j < len; ++j) part[j] += row[j];
    }
    for (int64_t j = 0; j < len; ++j) acc[j] += part[j];
  }
}

struct ReducePlan {
  int64_t out_numel = 0;
  int64_t count = 0;  // elements averaged per output
  // Coalesced input dims (size > 1), outermost first.
  std::vector<int64_t> sizes;
  std::vector<bool> reduced;
};

// The mean (or, with average false, the sum) over the reduced dims.
class MeanKernel final : public Kernel {
 public:
  MeanKernel(ReducePlan p, bool average) : p_(std::move(p)), average_(average) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const int64_t n_out = p_.out_numel;
    if (n_out == 0) return absl::OkStatus();
    if (p_.count == 0) {  // mean of nothing is NaN, sum 0, as in ATen
      std::fill(out, out + n_out, average_ ? std::numeric_limits<float>::quiet_NaN() : 0.f);
      return absl::OkStatus();
    }
    const double inv = average_ ? 1.0 / static_cast<double>(p_.count) : 1.0;
    const int nd = static_cast<int>(p_.sizes.size());
    const int64_t work_grain =
        std::max<int64_t>(1, (int64_t{1} << 15) / p_.count);
    // Kinds alternate after coalescing, so the layout is fixed by nd and
    // the kind of the first run.
    if (nd <= 1 || (nd == 2 && p_.reduced[1])) {
      // [K?, R]: rows of `count` contiguous elements (or a plain copy when
      // nothing > 1 is reduced).
      const int64_t r = p_.count;
      ParallelFor(n_out, work_grain, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          out[o] = static_cast<float>(SumContiguous(in + o * r, r) * inv);
        }
      });
      return absl::OkStatus();
    }
    if ((nd == 2 && p_.reduced[0]) ||
        (nd == 3 && !p_.reduced[0] && p_.reduced[1])) {
      // [K1?, R, K2]: accumulate rows of K2 elements (NHWC global
      // pooling: K1 = N, R = H * W, K2 = C), one block of columns per task:
      // the fewest blocks of at most kMaxColumns, of about equal width.
      // (Narrower blocks to split small C further measured slower: each
      // task then reads part of every cache line.)
      const int64_t k2 = p_.sizes[nd - 1];
      const int64_t r = p_.sizes[nd - 2];
      const int64_t k1 = nd == 3 ? p_.sizes[0] : 1;
      const int64_t blocks = (k2 + kMaxColumns - 1) / kMaxColumns;
      const int64_t chunk = std::min(kMaxColumns, ((k2 + blocks - 1) / blocks + 7) / 8 * 8);
      const int64_t chunks = (k2 + chunk - 1) / chunk;
      ParallelFor(k1 * chunks, 1, [&](int64_t b, int64_t e) {
        double acc[kMaxColumns];
        for (int64_t t = b; t < e; ++t) {
          const int64_t o1 = t / chunks;
          const int64_t c0 = (t % chunks) * chunk;
          const int64_t len = std::min(chunk, k2 - c0);
          std::fill(acc, acc + len, 0.0);
          SumColumns(in + o1 * r * k2 + c0, r, k2, len, acc);
          float* y = out + o1 * k2 + c0;
          for (int64_t j = 0; j < len; ++j) {
            y[j] = static_cast<float>(acc[j] * inv);
          }
        }
      });
      return absl::OkStatus();
    }
    // General layout: per output element, walk the reduced dims.
    std::vector<int64_t> strides(nd);
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; --d) {
      strides[d] = s;
      s *= p_.sizes[d];
    }
    std::vector<int> kept, red;
    for (int d = 0; d < nd; ++d) (p_.reduced[d] ? red : kept).push_back(d);
    ParallelFor(n_out, work_grain, [&](int64_t b, int64_t e) {
      std::vector<int64_t> idx(red.size());
      for (int64_t o = b; o < e; ++o) {
        int64_t base = 0, rem = o;
        for (int i = static_cast<int>(kept.size()) - 1; i >= 0; --i) {
          base += (rem % p_.sizes[kept[i]]) * strides[kept[i]];
          rem /= p_.sizes[kept[i]];
        }
        std::fill(idx.begin(), idx.end(), 0);
        double sum = 0.0;
        int64_t off = base;
        for (int64_t i = 0; i < p_.count; ++i) {
          sum += in[off];
          // Odometer over the reduced dims, innermost fastest.
          for (int j = static_cast<int>(red.size()) - 1; j >= 0; --j) {
            const int d = red[j];
            off += strides[d];
            if (++idx[j] < p_.sizes[d]) break;
            off -= idx[j] * strides[d];
            idx[j] = 0;
          }
        }
        out[o] = static_cast<float>(sum * inv);
      }
    });
    return absl::OkStatus();
  }

 private:
  ReducePlan p_;
  bool average_;
};

// out[o, k] = any(in[o, :, k] != 0) for the input seen as [outer, n, inner].
class AnyDimKernel final : public Kernel {
 public:
  AnyDimKernel(DType dtype, int64_t outer, int64_t n, int64_t inner)
      : dtype_(dtype), outer_(outer), n_(n), inner_(inner) {}

  absl::Status Run(const KernelContext& ctx) const override {
    uint8_t* out = ctx.outputs[0].as<uint8_t>();
    if (dtype_ == DType::kBool) {
      Reduce(ctx.inputs[0].as<const uint8_t>(), out);
    } else {
      Reduce(ctx.inputs[0].as<const float>(), out);
    }
    return absl::OkStatus();
  }

 private:
  template <typename T>
  void Reduce(const T* in, uint8_t* out) const {
    const int64_t n = n_, inner = inner_;
    if (outer_ == 0 || inner == 0) return;
    const int64_t grain =
        std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, n * inner));
    ParallelFor(outer_, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        uint8_t* y = out + o * inner;
        std::fill(y, y + inner, uint8_t{0});
        const T* x = in + o * n * inner;
        for (int64_t i = 0; i < n; ++i) {
          const T* row = x + i * inner;
          for (int64_t k = 0; k < inner; ++k) y[k] |= row[k] != T(0);
        }
      }
    });
  }

  DType dtype_;
  int64_t outer_, n_, inner_;
};

absl::StatusOr<PreparedOp> PrepareMeanOrSum(const NodeArgs& args, bool average) {
  // (self, dim: int[1]?, keepdim=False, *, dtype=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims_arg,
                        args.OptionalIntList(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  if (const Arg* dtype = args.Find(3, "dtype")) {
    if (dtype->kind != Arg::Kind::kDType) {
      return args.Error("dtype must be a dtype");
    }
    if (dtype->i != static_cast<int64_t>(DType::kF32)) {
      return args.Unimplemented(absl::StrCat(
          "dtype ", dtype->i, " is not supported (only f32 output)"));
    }
  }
  const int rank = self.rank();
  std::vector<bool> reduce(rank, false);
  if (!dims_arg || dims_arg->empty()) {
    std::fill(reduce.begin(), reduce.end(), true);
  } else {
    for (int64_t d : *dims_arg) {
      KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, rank));
      if (rank == 0) continue;  // a scalar's dim 0 / -1 reduces nothing
      if (reduce[w]) {
        return args.Error(absl::StrCat("dim ", w, " appears twice in ",
                                       ShapeString(*dims_arg)));
      }
      reduce[w] = true;
    }
  }
  std::vector<int64_t> out_shape;
  ReducePlan p;
  p.count = 1;
  for (int d = 0; d < rank; ++d) {
    if (reduce[d]) {
      p.count *= self.shape[d];
      if (keepdim) out_shape.push_back(1);
    } else {
      out_shape.push_back(self.shape[d]);
    }
    // Size-1 dims do not affect the layout; neighbours of the same kind
    // merge (the input is contiguous).
    if (self.shape[d] == 1) continue;
    if (!p.sizes.empty() && p.reduced.back() == reduce[d]) {
      p.sizes.back() *= self.shape[d];
    } else {
      p.sizes.push_back(self.shape[d]);
      p.reduced.push_back(reduce[d]);
    }
  }
  p.out_numel = Product(out_shape, 0, static_cast<int>(out_shape.size()));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, out_shape});
  op.kernel = std::make_unique<MeanKernel>(std::move(p), average);
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareMeanDim(const NodeArgs& args) {
  return PrepareMeanOrSum(args, /*average=*/true);
}

// reduce_general.cc: sums of i64 and bool tensors (and f32 results of them).
absl::StatusOr<PreparedOp> PrepareIntegerSumDim(const NodeArgs& args);

absl::StatusOr<PreparedOp> PrepareSumDimIntList(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (self.dtype != DType::kF32) return PrepareIntegerSumDim(args);
  return PrepareMeanOrSum(args, /*average=*/false);
}

}  // namespace kiln::runtime

namespace kiln::runtime {

absl::StatusOr<PreparedOp> PrepareAnyDim(const NodeArgs& args) {
  // (self, dim, keepdim=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (self.dtype != DType::kBool && self.dtype != DType::kF32) {
    return args.Error(absl::StrCat("self must be bool or f32, got ",
                                   self.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  std::vector<int64_t> shape = self.shape;
  int64_t outer = 1, n = 1, inner = 1;
  if (self.rank() > 0) {
    outer = Product(self.shape, 0, dim);
    n = self.shape[dim];
    inner = Product(self.shape, dim + 1, self.rank());
    if (keepdim) {
      shape[dim] = 1;
    } else {
      shape.erase(shape.begin() + dim);
    }
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kBool, shape});
  op.kernel = std::make_unique<AnyDimKernel>(self.dtype, outer, n, inner);
  return op;
}

}  // namespace kiln::runtime
