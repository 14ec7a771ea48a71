// aten.constant_pad_nd.default on any runtime dtype: pads (or, with
// negative amounts, crops) the trailing dims, `pad` listing (before, after)
// pairs from the last dim backwards like ATen, new elements set to `value`
// converted to the dtype as a cast converts it (a complex value is its
// real part plus zero imaginary part).
//
// The output is filled with `value` only where no input lands, then the
// kept input box is copied row by row (the innermost run is one memcpy).
#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/dtype_convert.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

struct PadPlan {
  std::vector<int64_t> in_shape, out_shape;
  // Per dim: first output index that receives input, first input index
  // read, and how many are copied.
  std::vector<int64_t> out_start, in_start, len;
};

// T: an unsigned integer of the element's size; `value` holds the fill
// element's bytes.
template <typename T>
class ConstantPadKernel final : public Kernel {
 public:
  ConstantPadKernel(PadPlan p, T value) : p_(std::move(p)), value_(value) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const T* in = ctx.inputs[0].as<const T>();
    T* out = ctx.outputs[0].as<T>();
    const int rank = static_cast<int>(p_.out_shape.size());
    const int64_t out_numel = Product(p_.out_shape, 0, rank);
    if (out_numel == 0) return absl::OkStatus();
    if (rank == 0) {
      out[0] = in[0];
      return absl::OkStatus();
    }
    const std::vector<int64_t> in_strides = ContiguousStrides(p_.in_shape);
    bool empty_box = false;
    for (int d = 0; d < rank; ++d) empty_box |= p_.len[d] == 0;
    // Each task owns whole output rows (last dim): it fills the padding of
    // its rows and copies their input run, so no element is written twice.
    const int64_t ow = p_.out_shape[rank - 1];
    const int64_t rows = out_numel / ow;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / ow);
    const T v = value_;
    ParallelFor(rows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* y = out + r * ow;
        // Output coordinates of this row; inside the box on every outer dim?
        int64_t rem = r, in_off = 0;
        bool inside = !empty_box;
        for (int d = rank - 2; d >= 0; --d) {
          const int64_t idx = rem % p_.out_shape[d];
          rem /= p_.out_shape[d];
          const int64_t rel = idx - p_.out_start[d];
          if (rel < 0 || rel >= p_.len[d]) inside = false;
          in_off += (p_.in_start[d] + rel) * in_strides[d];
        }
        if (!inside) {
          std::fill(y, y + ow, v);
          continue;
        }
        const int last = rank - 1;
        const int64_t x0 = p_.out_start[last], n = p_.len[last];
        std::fill(y, y + x0, v);
        std::memcpy(y + x0, in + in_off + p_.in_start[last],
                    n * sizeof(T));
        std::fill(y + x0 + n, y + ow, v);
      }
    });
    return absl::OkStatus();
  }

 private:
  PadPlan p_;
  T value_;
};

template <typename T>
std::unique_ptr<Kernel> MakePadKernel(PadPlan p, DType dtype, double value) {
  T bits{};
  ConvertElements(DType::kF64, &value, dtype, &bits, 1);
  return std::make_unique<ConstantPadKernel<T>>(std::move(p), bits);
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareConstantPadNd(const NodeArgs& args) {
  // (self, pad: int[], value=0)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireMovable(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> pad, args.IntList(1, "pad"));
  KILN_ASSIGN_OR_RETURN(double value, args.Float(2, "value", 0.0));
  const int rank = self.rank();
  if (pad.size() % 2 != 0) {
    return args.Error(absl::StrCat("pad ", ShapeString(pad),
                                   " must have an even length"));
  }
  if (static_cast<int>(pad.size() / 2) > rank) {
    return args.Error(absl::StrCat("pad ", ShapeString(pad), " pads more ",
                                   "dims than ", self.ToString(), " has"));
  }
  PadPlan p;
  p.in_shape = self.shape;
  p.out_shape = self.shape;
  p.out_start.assign(rank, 0);
  p.in_start.assign(rank, 0);
  p.len = self.shape;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int d = rank - 1 - static_cast<int>(i);
    const int64_t lo = pad[2 * i], hi = pad[2 * i + 1];
    const int64_t out = self.shape[d] + lo + hi;
    if (out < 0) {
      return args.Error(absl::StrCat(
          "pad ", ShapeString(pad), " gives dimension ", d, " of ",
          self.ToString(), " a negative size ", out));
    }
    p.out_shape[d] = out;
    p.out_start[d] = std::max<int64_t>(lo, 0);
    p.in_start[d] = std::max<int64_t>(-lo, 0);
    p.len[d] = std::max<int64_t>(
        0, self.shape[d] - p.in_start[d] - std::max<int64_t>(-hi, 0));
    p.len[d] = std::min(p.len[d], out - p.out_start[d]);
  }
  TensorMeta out{self.dtype, p.out_shape};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  PreparedOp op;
  op.outputs.push_back(out);
  switch (ElementSize(self.dtype)) {
    case 1: op.kernel = MakePadKernel<uint8_t>(std::move(p), self.dtype, value); break;
    case 2: op.kernel = MakePadKernel<uint16_t>(std::move(p), self.dtype, value); break;
    case 4: op.kernel = MakePadKernel<uint32_t>(std::move(p), self.dtype, value); break;
    default: op.kernel = MakePadKernel<uint64_t>(std::move(p), self.dtype, value); break;
  }
  return op;
}

}  // namespace kiln::runtime
