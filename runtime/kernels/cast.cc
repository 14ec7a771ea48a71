// Dtype casts: aten._to_copy.default between any two runtime dtypes, c64
// included (float -> int truncates toward zero, -> bool is `!= 0`, complex
// -> real keeps the real part; see dtype_convert.h).
// Layout, device (CPU) and memory format do not change values here:
// runtime tensors are dense and the client restores eager's strides.
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/dtype_convert.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {
namespace {

class CastKernel final : public Kernel {
 public:
  CastKernel(DType from, DType to, int64_t n) : from_(from), to_(to), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    if (from_ == to_) {
      const char* src = static_cast<const char*>(ctx.inputs[0].data);
      char* dst = static_cast<char*>(ctx.outputs[0].data);
      const int64_t bytes = n_ * static_cast<int64_t>(ElementSize(from_));
      ParallelFor(bytes, int64_t{1} << 18, [&](int64_t b, int64_t e) {
        std::memcpy(dst + b, src + b, e - b);
      });
      return absl::OkStatus();
    }
    ConvertElements(from_, ctx.inputs[0].data, to_, ctx.outputs[0].data, n_);
    return absl::OkStatus();
  }

 private:
  DType from_, to_;
  int64_t n_;
};

}  // namespace

absl::StatusOr<PreparedOp> PrepareToCopy(const NodeArgs& args) {
  // (self, *, dtype=None, layout=None, device=None, pin_memory=None,
  //  non_blocking=False, memory_format=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  if (!IsConvertibleDType(self.dtype)) {
    return args.Unimplemented(absl::StrCat("cannot cast from ",
                                           self.ToString()));
  }
  DType to = self.dtype;
  if (const Arg* dtype = args.Find(-1, "dtype")) {
    if (dtype->kind != Arg::Kind::kDType || !IsValidDType(static_cast<int>(dtype->i))) {
      return args.Error("dtype must be a dtype");
    }
    to = static_cast<DType>(dtype->i);
    if (!IsConvertibleDType(to)) {
      return args.Unimplemented(absl::StrCat("casts to ", DTypeName(to), " are not supported"));
    }
  }
  if (const Arg* device = args.Find(-1, "device")) {
    if (device->kind == Arg::Kind::kDevice && device->s.rfind("cpu", 0) != 0) {
      return args.Unimplemented(
          absl::StrCat("copies to device ", device->s, " are not supported"));
    }
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{to, self.shape});
  op.kernel = std::make_unique<CastKernel>(self.dtype, to, self.NumElements());
  return op;
}

}  // namespace kiln::runtime
