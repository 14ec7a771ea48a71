// aten.roll.default on f32: out[(i + shift) mod n] = in[i] along each listed
// dim (several shifts of one dim add up); with no dims the flattened tensor
// is rolled and the shape kept, as in ATen.
//
// Output rows along the last dim are two memcpys (the wrapped halves); each
// row's source row follows from the shifted outer coordinates.
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

class RollKernel final : public Kernel {
 public:
  // `shape` is the (possibly flattened) shape iterated, shift[d] in
  // [0, shape[d]).
  RollKernel(std::vector<int64_t> shape, std::vector<int64_t> shift)
      : shape_(std::move(shape)), shift_(std::move(shift)) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* out = ctx.outputs[0].as<float>();
    const int rank = static_cast<int>(shape_.size());
    const int64_t numel = Product(shape_, 0, rank);
    if (numel == 0) return absl::OkStatus();
    const int64_t w = shape_[rank - 1];
    const int64_t s = shift_[rank - 1];
    const int64_t rows = numel / w;
    const std::vector<int64_t> strides = ContiguousStrides(shape_);
    ParallelFor(rows, std::max<int64_t>(1, (int64_t{1} << 14) / w),
                [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, src = 0;
        for (int d = rank - 2; d >= 0; --d) {
          const int64_t n = shape_[d];
          const int64_t idx = rem % n;
          rem /= n;
          int64_t from = idx - shift_[d];
          if (from < 0) from += n;
          src += from * strides[d];
        }
        const float* x = in + src;
        float* y = out + r * w;
        // y[j] = x[(j - s) mod w]: the first s outputs come from the tail.
        std::memcpy(y, x + (w - s), s * sizeof(float));
        std::memcpy(y + s, x, (w - s) * sizeof(float));
      }
    });
    return absl::OkStatus();
  }

 private:
  std::vector<int64_t> shape_, shift_;
};

int64_t Mod(int64_t a, int64_t n) {
  const int64_t m = a % n;
  return m < 0 ? m + n : m;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareRoll(const NodeArgs& args) {
  // (self, shifts: int[1], dims: int[1]=[])
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shifts, args.IntList(1, "shifts"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.IntList(2, "dims", {}));
  std::vector<int64_t> shape, shift;
  if (dims.empty()) {
    if (shifts.size() != 1) {
      return args.Error(absl::StrCat("shifts ", ShapeString(shifts),
                                     " must have one value when dims is empty"));
    }
    const int64_t n = self.NumElements();
    shape = {n};
    shift = {n == 0 ? 0 : Mod(shifts[0], n)};
  } else {
    if (shifts.size() != dims.size()) {
      return args.Error(absl::StrCat("shifts ", ShapeString(shifts),
                                     " and dims ", ShapeString(dims),
                                     " must have the same length"));
    }
    if (self.rank() == 0) return args.Error("roll() needs a tensor with dims");
    shape = self.shape;
    shift.assign(self.rank(), 0);
    for (size_t i = 0; i < dims.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(int d, WrapDim(args, dims[i], self.rank()));
      if (shape[d] > 0) shift[d] = Mod(shift[d] + Mod(shifts[i], shape[d]), shape[d]);
    }
  }
  if (shape.empty()) {  // 0-dim input with no dims: a copy
    shape = {1};
    shift = {0};
  }
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<RollKernel>(std::move(shape), std::move(shift));
  return op;
}

}  // namespace kiln::runtime
