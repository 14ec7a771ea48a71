// Ordering along one dim, f32 and i64, with the positions of the values:
//   aten.sort.default / .stable   (values, indices) of every line, sorted
//   aten.topk.default             the k largest (or smallest), sorted
//   aten.kthvalue.default         the k-th smallest, its dim dropped or kept
//   aten.median.dim / nanmedian.dim  the lower median (NaN if the line has
//                                 one / of the numbers), and whole-tensor forms
// NaN orders above every number (last ascending, first descending), as in
// ATen. Sorting is stable whatever `stable` says (ATen's CPU sort is, and
// equal values then keep their order); topk and kthvalue break ties by
// position, which ATen's selection does not promise.
//
// Each line of the [outer, n, inner] view is gathered into scratch, ordered
// by index, and written back; lines are independent and run in parallel.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

template <typename T>
bool NanOf(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// a before b in ascending order, NaN last.
template <typename T>
bool Less(T a, T b) {
  if (NanOf(a)) return false;
  if (NanOf(b)) return true;
  return a < b;
}

enum class Mode { kSort, kTopk, kKth, kMedian, kNanMedian };

template <typename T>
class SortKernel final : public Kernel {
 public:
  struct Config {
    int64_t outer = 1, n = 1, inner = 1;
    int64_t k = 0;  // values kept per line (n for sort, k for topk, 1 for kthvalue)
    int64_t kth = 0;
    bool descending = false;  // sort: descending; topk: largest
    Mode mode = Mode::kSort;
  };
  explicit SortKernel(Config c) : c_(c) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const T* in = ctx.inputs[0].template as<const T>();
    T* values = ctx.outputs[0].template as<T>();
    int64_t* indices = ctx.outputs.size() > 1 ? ctx.outputs[1].template as<int64_t>() : nullptr;
    const int64_t lines = c_.outer * c_.inner, n = c_.n, inner = c_.inner, kept = c_.k;
    ParallelFor(lines, 1, [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(n);
      for (int64_t line = b; line < e; ++line) {
        const int64_t o = line / inner, i = line % inner;
        const T* src = in + o * n * inner + i;
        std::iota(order.begin(), order.end(), 0);
        auto before = [&](int64_t x, int64_t y) {
          const T a = src[x * inner], bv = src[y * inner];
          return c_.descending ? Less(bv, a) : Less(a, bv);
        };
        switch (c_.mode) {
          case Mode::kSort:
            std::stable_sort(order.begin(), order.end(), before);
            break;
          case Mode::kTopk:
            std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                              [&](int64_t x, int64_t y) {
                                return before(x, y) || (!before(y, x) && x < y);
                              });
            break;
          case Mode::kKth:
          case Mode::kMedian:
          case Mode::kNanMedian: {
            int64_t kth = c_.kth;
            if (c_.mode != Mode::kKth) {
              int64_t nans = 0, first_nan = -1;
              for (int64_t j = 0; j < n; ++j) {
                if (NanOf(src[j * inner])) {
                  if (first_nan < 0) first_nan = j;
                  ++nans;
                }
              }
              if (c_.mode == Mode::kMedian && nans > 0) {  // NaN is the median
                order[0] = first_nan;
                break;
              }
              const int64_t m = n - nans;
              kth = m > 0 ? (m - 1) / 2 : 0;
            }
            std::nth_element(order.begin(), order.begin() + kth, order.end(),
                             [&](int64_t x, int64_t y) {
                               return before(x, y) || (!before(y, x) && x < y);
                             });
            order[0] = order[kth];
            break;
          }
        }
        T* vdst = values + o * kept * inner + i;
        int64_t* idst = indices != nullptr ? indices + o * kept * inner + i : nullptr;
        for (int64_t j = 0; j < kept; ++j) {
          vdst[j * inner] = src[order[j] * inner];
          if (indices != nullptr) idst[j * inner] = order[j];
        }
      }
    });
    return absl::OkStatus();
  }

 private:
  Config c_;
};

absl::StatusOr<PreparedOp> PrepareOrdering(const NodeArgs& args, const TensorMeta& self,
                                           int64_t dim_arg, typename SortKernel<float>::Config c,
                                           bool keepdim) {
  if (self.dtype != DType::kF32 && self.dtype != DType::kI64) {
    return args.Error(absl::StrCat("self must be f32 or i64, got ", self.ToString()));
  }
  KILN_ASSIGN_OR_RETURN(DimLines lines, LinesAlong(args, self, dim_arg));
  const int dim = lines.dim;
  c.outer = lines.outer;
  c.n = lines.n;
  c.inner = lines.inner;
  if (c.mode == Mode::kSort) c.k = c.n;
  if ((c.mode == Mode::kMedian || c.mode == Mode::kNanMedian) && c.n == 0) {
    return args.Error("median of an empty dim");
  }
  if (c.k < 0 || c.k > c.n) {
    return args.Error(absl::StrCat("k ", c.k, " is out of range for a dim of size ", c.n));
  }
  std::vector<int64_t> out_shape = self.shape;
  if (self.rank() > 0) {
    if (c.mode != Mode::kSort && c.mode != Mode::kTopk && !keepdim) {
      out_shape.erase(out_shape.begin() + dim);
    } else {
      out_shape[dim] = c.k;
    }
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, out_shape});
  op.outputs.push_back(TensorMeta{DType::kI64, out_shape});
  if (self.dtype == DType::kF32) {
    op.kernel = std::make_unique<SortKernel<float>>(c);
  } else {
    typename SortKernel<int64_t>::Config ci;
    ci.outer = c.outer;
    ci.n = c.n;
    ci.inner = c.inner;
    ci.k = c.k;
    ci.kth = c.kth;
    ci.descending = c.descending;
    ci.mode = c.mode;
    op.kernel = std::make_unique<SortKernel<int64_t>>(ci);
  }
  return op;
}

absl::StatusOr<PreparedOp> MedianDim(const NodeArgs& args, Mode mode) {
  // (self, dim, keepdim=False) -> (values, indices)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  SortKernel<float>::Config c;
  c.mode = mode;
  c.k = 1;
  return PrepareOrdering(args, self, dim, c, keepdim);
}

absl::StatusOr<PreparedOp> MedianAll(const NodeArgs& args, Mode mode) {
  // (self) -> 0-D value: the median of the flattened tensor.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  TensorMeta flat{self.dtype, {self.NumElements()}};
  SortKernel<float>::Config c;
  c.mode = mode;
  c.k = 1;
  KILN_ASSIGN_OR_RETURN(PreparedOp op, PrepareOrdering(args, flat, 0, c, false));
  op.outputs.resize(1);  // no indices: the kernel writes none
  return op;
}

// A sort whose dim and descending flag stand at these positions.
absl::StatusOr<PreparedOp> PrepareSortWith(const NodeArgs& args, int dim_pos, int descending_pos) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, args.Int(dim_pos, "dim", -1));
  KILN_ASSIGN_OR_RETURN(bool descending, args.Bool(descending_pos, "descending", false));
  SortKernel<float>::Config c;
  c.mode = Mode::kSort;
  c.descending = descending;
  return PrepareOrdering(args, self, dim, c, true);
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareSort(const NodeArgs& args) {
  // (self, dim=-1, descending=False)
  return PrepareSortWith(args, 1, 2);
}

absl::StatusOr<PreparedOp> PrepareSortStable(const NodeArgs& args) {
  // (self, *, stable: bool?, dim=-1, descending=False); every sort here is
  // stable.
  return PrepareSortWith(args, 2, 3);
}

absl::StatusOr<PreparedOp> PrepareTopk(const NodeArgs& args) {
  // (self, k, dim=-1, largest=True, sorted=True): always sorted here.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t k, args.Int(1, "k"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, args.Int(2, "dim", -1));
  KILN_ASSIGN_OR_RETURN(bool largest, args.Bool(3, "largest", true));
  SortKernel<float>::Config c;
  c.mode = Mode::kTopk;
  c.k = k;
  c.descending = largest;
  return PrepareOrdering(args, self, dim, c, true);
}

absl::StatusOr<PreparedOp> PrepareKthvalue(const NodeArgs& args) {
  // (self, k, dim=-1, keepdim=False): the k-th smallest, k from 1.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t k, args.Int(1, "k"));
  KILN_ASSIGN_OR_RETURN(int64_t dim, args.Int(2, "dim", -1));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(3, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(int wrapped, WrapDim(args, dim, self.rank()));
  const int64_t n = self.rank() == 0 ? 1 : self.shape[wrapped];
  if (k < 1 || k > n) {
    return args.Error(absl::StrCat("k ", k, " is out of range for a dim of size ", n));
  }
  SortKernel<float>::Config c;
  c.mode = Mode::kKth;
  c.k = 1;
  c.kth = k - 1;
  return PrepareOrdering(args, self, dim, c, keepdim);
}

absl::StatusOr<PreparedOp> PrepareMedianDim(const NodeArgs& args) {
  return MedianDim(args, Mode::kMedian);
}
absl::StatusOr<PreparedOp> PrepareNanmedianDim(const NodeArgs& args) {
  return MedianDim(args, Mode::kNanMedian);
}
absl::StatusOr<PreparedOp> PrepareMedian(const NodeArgs& args) {
  return MedianAll(args, Mode::kMedian);
}
absl::StatusOr<PreparedOp> PrepareNanmedian(const NodeArgs& args) {
  return MedianAll(args, Mode::kNanMedian);
}

}  // namespace kiln::runtime
