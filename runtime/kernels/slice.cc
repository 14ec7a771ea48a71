// aten.slice_scatter.default on f32 tensors: self with the slice (dim,
// start, end, step, with ATen's clamping of negative and out-of-range
// bounds) replaced by src; aten.select_scatter.default: self with the
// index `index` of dim replaced by src (a window of one). Plain slices and
// selects are views (view_ops.cc).
//
// The tensor is seen as [outer, size(dim), inner]: self is copied whole,
// then src's runs of `inner` (or, with step 1, `len * inner`) contiguous
// floats are written per outer index, in parallel over outer indices.
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kGrainFloats = int64_t{1} << 15;

// One strided window of a dim: indices start, start + step, ... (len of
// them) out of `size`.
struct DimWindow {
  int64_t outer = 1, size = 0, inner = 1;
  int64_t start = 0, step = 1, len = 0;
};

// Writes the dense [outer, len, inner] `src` into window `w` of `dst`
// ([outer, size, inner]).
void ScatterWindow(const DimWindow& w, const float* src, float* dst) {
  if (w.outer == 0 || w.len == 0 || w.inner == 0) return;
  const int64_t row = w.len * w.inner;
  const int64_t grain = std::max<int64_t>(1, kGrainFloats / row);
  ParallelFor(w.outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      float* full = dst + (o * w.size + w.start) * w.inner;
      const float* dense = src + o * row;
      if (w.step == 1) {
        std::memcpy(full, dense, row * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < w.len; ++j) {
        std::memcpy(full + j * w.step * w.inner, dense + j * w.inner,
                    w.inner * sizeof(float));
      }
    }
  });
}

DimWindow WindowOf(const TensorMeta& t, int dim) {
  DimWindow w;
  w.outer = Product(t.shape, 0, dim);
  w.size = t.shape[dim];
  w.inner = Product(t.shape, dim + 1, t.rank());
  return w;
}

// out = self with window `w` replaced by src.
class SliceScatterKernel final : public Kernel {
 public:
  SliceScatterKernel(DimWindow w, int64_t numel, int self_index,
                     int src_index)
      : w_(w), numel_(numel), self_index_(self_index), src_index_(src_index) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* self = ctx.inputs[self_index_].as<const float>();
    const float* src = ctx.inputs[src_index_].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    // Planned in place (ops.def: Overwrites), out is self: only the
    // window is written.
    if (out != self) {
      ParallelFor(numel_, int64_t{1} << 16, [&](int64_t b, int64_t e) {
        std::memcpy(out + b, self + b, (e - b) * sizeof(float));
      });
    }
    ScatterWindow(w_, src, out);
    return absl::OkStatus();
  }

 private:
  DimWindow w_;
  int64_t numel_;
  int self_index_, src_index_;
};

// ATen's slice bounds: optional start/end, wrapped once when negative and
// clamped into [0, size]; an empty range when end < start.
// `self` must have rank >= 1; sets *dim to the wrapped dim.
absl::StatusOr<DimWindow> ReadSlice(const NodeArgs& args,
                                    const TensorMeta& self, int pos,
                                    int* dim) {
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(pos, "dim", 0));
  KILN_ASSIGN_OR_RETURN(*dim, WrapDim(args, dim_arg, self.rank()));
  DimWindow w = WindowOf(self, *dim);
  const int64_t size = w.size;
  KILN_ASSIGN_OR_RETURN(int64_t start, args.Int(pos + 1, "start", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end, args.Int(pos + 2, "end", INT64_MAX));
  KILN_ASSIGN_OR_RETURN(int64_t step, args.Int(pos + 3, "step", 1));
  if (step <= 0) return args.Error("slice step must be positive");
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  w.start = start;
  w.step = step;
  w.len = (end - start + step - 1) / step;
  return w;
}

std::vector<int64_t> WindowShape(const TensorMeta& self, int dim,
                                 int64_t len) {
  std::vector<int64_t> shape = self.shape;
  shape[dim] = len;
  return shape;
}

// self with window `w` replaced by src, after checking src has `expected`
// (the window's shape, less dim for select_scatter).
absl::StatusOr<PreparedOp> WindowScatter(const NodeArgs& args,
                                         const TensorMeta& self,
                                         const TensorMeta& src, DimWindow w,
                                         const std::vector<int64_t>& expected,
                                         absl::string_view what) {
  if (src.shape != expected) {
    return args.Error(absl::StrCat("src ", src.ToString(), " must have ",
                                   what, " ", ShapeString(expected)));
  }
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<SliceScatterKernel>(
      w, self.NumElements(), InputIndex(args, 0, "self"),
      InputIndex(args, 1, "src"));
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareSliceScatter(const NodeArgs& args) {
  // (self, src, dim=0, start=None, end=None, step=1)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta src, args.Tensor(1, "src"));
  KILN_RETURN_IF_ERROR(RequireDType(args, src, "src"));
  if (self.rank() == 0) {
    return args.Error("slice_scatter() cannot be applied to a 0-dim tensor");
  }
  int dim = 0;
  KILN_ASSIGN_OR_RETURN(DimWindow w, ReadSlice(args, self, 2, &dim));
  return WindowScatter(args, self, src, w, WindowShape(self, dim, w.len),
                       "the slice's shape");
}

absl::StatusOr<PreparedOp> PrepareSelectScatter(const NodeArgs& args) {
  // (self, src, dim, index): src has self's shape without dim. Kept whole
  // by the client's lowering rather than decomposed into a where over an
  // arange and an expanded src (Longformer writes its windows' edges so);
  // it then writes one slab, over self in place when nothing else reads
  // self (ops.def: Overwrites).
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(TensorMeta src, args.Tensor(1, "src"));
  KILN_RETURN_IF_ERROR(RequireDType(args, src, "src"));
  if (self.rank() == 0) {
    return args.Error("select_scatter() cannot be applied to a 0-dim tensor");
  }
  KILN_ASSIGN_OR_RETURN(int64_t dim_arg, args.Int(2, "dim"));
  KILN_ASSIGN_OR_RETURN(int dim, WrapDim(args, dim_arg, self.rank()));
  KILN_ASSIGN_OR_RETURN(int64_t index, args.Int(3, "index"));
  const int64_t size = self.shape[dim];
  if (index < -size || index >= size) {
    return args.Error(absl::StrCat("index ", index, " is out of range for dim ", dim,
                                   " of size ", size));
  }
  DimWindow w = WindowOf(self, dim);
  w.start = index < 0 ? index + size : index;
  w.len = 1;
  std::vector<int64_t> expected = self.shape;
  expected.erase(expected.begin() + dim);
  return WindowScatter(args, self, src, w, expected,
                       absl::StrCat("the shape of self without dim ", dim));
}

}  // namespace kiln::runtime
