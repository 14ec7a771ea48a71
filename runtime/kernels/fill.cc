// aten.full_like.default: self's shape filled with a number, in f32, i64
// or bool (the `dtype` kwarg, else self's dtype, as in ATen); layout,
// device, pin_memory and memory_format do not change the values and are
// ignored. (aten.full and aten.scalar_tensor are in factory.cc.)
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

class FillKernel final : public Kernel {
 public:
  FillKernel(DType dtype, double value, int64_t n)
      : dtype_(dtype), value_(value), n_(n) {}

  absl::Status Run(const KernelContext& ctx) const override {
    void* out = ctx.outputs[0].data;
    switch (dtype_) {
      case DType::kF32:
        Fill(static_cast<float*>(out), static_cast<float>(value_));
        break;
      case DType::kI64:
        Fill(static_cast<int64_t*>(out), static_cast<int64_t>(value_));
        break;
      default:  // kBool
        Fill(static_cast<bool*>(out), value_ != 0.0);
        break;
    }
    return absl::OkStatus();
  }

 private:
  template <typename T>
  void Fill(T* out, T v) const {
    ParallelFor(n_, int64_t{1} << 16, [&](int64_t b, int64_t e) {
      std::fill(out + b, out + e, v);
    });
  }

  DType dtype_;
  double value_;
  int64_t n_;
};

// The value of a Scalar argument, and the dtype ATen infers from its kind.
absl::StatusOr<std::pair<double, DType>> ReadScalar(const NodeArgs& args,
                                                    int pos,
                                                    const char* name) {
  const Arg* a = args.Find(pos, name);
  if (a == nullptr) return args.Error(absl::StrCat("missing ", name));
  switch (a->kind) {
    case Arg::Kind::kInt:
      return std::pair{static_cast<double>(a->i), DType::kI64};
    case Arg::Kind::kFloat:
      return std::pair{a->f, DType::kF32};
    case Arg::Kind::kBool:
      return std::pair{a->b ? 1.0 : 0.0, DType::kBool};
    default:
      return args.Error(absl::StrCat(name, " must be a number"));
  }
}

// The `dtype` kwarg if given, else `def`; only f32, i64 and bool.
absl::StatusOr<DType> ReadDType(const NodeArgs& args, DType def) {
  DType dtype = def;
  if (const Arg* a = args.Find(-1, "dtype")) {
    if (a->kind != Arg::Kind::kDType) return args.Error("dtype must be a dtype");
    dtype = static_cast<DType>(a->i);
  }
  if (dtype != DType::kF32 && dtype != DType::kI64 && dtype != DType::kBool) {
    return args.Unimplemented(absl::StrCat(
        "dtype ", DTypeName(dtype), " is not supported (f32, i64, bool)"));
  }
  return dtype;
}

absl::StatusOr<PreparedOp> MakeFill(const NodeArgs& args,
                                    std::vector<int64_t> shape, DType dtype,
                                    double value) {
  for (int64_t d : shape) {
    if (d < 0) {
      return args.Error(absl::StrCat("size ", ShapeString(shape),
                                     " has a negative dimension"));
    }
  }
  if (shape.size() > static_cast<size_t>(kMaxRank)) {
    return args.Error(absl::StrCat("rank of ", ShapeString(shape),
                                   " exceeds the limit of ", kMaxRank));
  }
  TensorMeta out{dtype, std::move(shape)};
  KILN_RETURN_IF_ERROR(ValidateMeta(out));
  PreparedOp op;
  op.outputs.push_back(out);
  op.kernel = std::make_unique<FillKernel>(dtype, value, out.NumElements());
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareFullLike(const NodeArgs& args) {
  // (self, fill_value, *, dtype=None, layout, device, pin_memory,
  //  memory_format)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(auto value, ReadScalar(args, 1, "fill_value"));
  KILN_ASSIGN_OR_RETURN(DType dtype, ReadDType(args, self.dtype));
  return MakeFill(args, self.shape, dtype, value.first);
}

}  // namespace kiln::runtime
