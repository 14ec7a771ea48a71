// Tensors made from literals: aten.arange.start_step, aten.full.default,
// aten.scalar_tensor.default and aten.empty.memory_format (f32, i64, bool). Their values are computed
// at prepare time; Run() copies (or, for large fills, broadcasts) them.
#include <cmath>
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

// Writes `bytes` of precomputed data.
class ConstantDataKernel final : public Kernel {
 public:
  explicit ConstantDataKernel(std::vector<char> data) : data_(std::move(data)) {}
  absl::Status Run(const KernelContext& ctx) const override {
    if (!data_.empty()) std::memcpy(ctx.outputs[0].data, data_.data(), data_.size());
    return absl::OkStatus();
  }

 private:
  std::vector<char> data_;
};

// Repeats one element of `elem_size` bytes n times.
class FillKernel final : public Kernel {
 public:
  FillKernel(uint64_t pattern, int elem_size, int64_t n)
      : pattern_(pattern), elem_size_(elem_size), n_(n) {}
  absl::Status Run(const KernelContext& ctx) const override {
    char* out = static_cast<char*>(ctx.outputs[0].data);
    const uint64_t pattern = pattern_;
    const int es = elem_size_;
    ParallelFor(n_, int64_t{1} << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) std::memcpy(out + i * es, &pattern, es);
    });
    return absl::OkStatus();
  }

 private:
  uint64_t pattern_;
  int elem_size_;
  int64_t n_;
};

struct Number {
  bool is_float = false;
  bool is_bool = false;
  double f = 0.0;
  int64_t i = 0;
};

absl::StatusOr<Number> ReadNumber(const NodeArgs& args, int pos,
                                  const char* name) {
  const Arg* arg = args.Find(pos, name);
  if (arg == nullptr) return args.Error(absl::StrCat("missing number ", name));
  Number n;
  switch (arg->kind) {
    case Arg::Kind::kInt:
      n.i = arg->i;
      n.f = static_cast<double>(arg->i);
      return n;
    case Arg::Kind::kFloat:
      n.is_float = true;
      n.f = arg->f;
      return n;
    case Arg::Kind::kBool:
      n.is_bool = true;
      n.i = arg->b;
      n.f = arg->b;
      return n;
    default:
      return args.Error(absl::StrCat(name, " must be a number"));
  }
}

// The element bits of `v` as dtype d.
uint64_t Bits(const Number& v, DType d) {
  uint64_t bits = 0;
  if (d == DType::kF32) {
    const float x = static_cast<float>(v.f);
    std::memcpy(&bits, &x, sizeof(x));
  } else if (d == DType::kI64) {
    const int64_t x = v.is_float ? ConvertElement<int64_t>(v.f) : v.i;
    std::memcpy(&bits, &x, sizeof(x));
  } else {
    const bool x = v.is_float ? v.f != 0.0 : v.i != 0;
    std::memcpy(&bits, &x, sizeof(x));
  }
  return bits;
}

PreparedOp Fill(DType dtype, std::vector<int64_t> shape, const Number& v) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{dtype, std::move(shape)});
  op.kernel = std::make_unique<FillKernel>(
      Bits(v, dtype), static_cast<int>(ElementSize(dtype)),
      op.outputs[0].NumElements());
  return op;
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareArangeStartStep(const NodeArgs& args) {
  // (start, end, step=1, *, dtype=None, layout, device, pin_memory)
  KILN_ASSIGN_OR_RETURN(Number start, ReadNumber(args, 0, "start"));
  KILN_ASSIGN_OR_RETURN(Number end, ReadNumber(args, 1, "end"));
  Number step;
  step.i = 1;
  step.f = 1.0;
  if (args.Find(2, "step") != nullptr) {
    KILN_ASSIGN_OR_RETURN(step, ReadNumber(args, 2, "step"));
  }
  const bool any_float = start.is_float || end.is_float || step.is_float;
  KILN_ASSIGN_OR_RETURN(
      DType dtype,
      DTypeArgOr(args, -1, "dtype", any_float ? DType::kF32 : DType::kI64));
  if (dtype == DType::kBool) return args.Unimplemented("arange of bool");
  if (step.f == 0.0) return args.Error("arange step must be nonzero");
  const double span = (end.f - start.f) / step.f;
  if (!std::isfinite(span)) return args.Error("arange bounds must be finite");
  // ATen: size = ceil((end - start) / step), in double for float bounds
  // and exactly for integers.
  int64_t n = 0;
  if (!any_float) {
    const int64_t d = end.i - start.i;
    n = step.i > 0 ? (d + step.i - 1) / step.i : (d + step.i + 1) / step.i;
    if (n < 0) n = 0;
  } else {
    n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  }
  if (n > (int64_t{1} << 32)) return args.Error("arange is too long");
  std::vector<char> data(n * ElementSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) {
      // ATen's CPU kernel computes start + i * step in double.
      const float v = static_cast<float>(start.f + static_cast<double>(i) * step.f);
      std::memcpy(data.data() + i * 4, &v, 4);
    } else {
      const int64_t v = any_float
          ? ConvertElement<int64_t>(start.f + static_cast<double>(i) * step.f)
          : start.i + i * step.i;
      std::memcpy(data.data() + i * 8, &v, 8);
    }
  }
  PreparedOp op;
  op.outputs.push_back(TensorMeta{dtype, {n}});
  op.kernel = std::make_unique<ConstantDataKernel>(std::move(data));
  return op;
}

absl::StatusOr<PreparedOp> PrepareFull(const NodeArgs& args) {
  // (size, fill_value, *, dtype=None, layout, device, pin_memory)
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(0, "size"));
  KILN_ASSIGN_OR_RETURN(Number v, ReadNumber(args, 1, "fill_value"));
  const DType inferred = v.is_bool ? DType::kBool
                         : v.is_float ? DType::kF32
                                      : DType::kI64;
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", inferred));
  for (int64_t s : size) {
    if (s < 0) return args.Error(absl::StrCat("negative size in ", ShapeString(size)));
  }
  TensorMeta meta{dtype, size};
  KILN_RETURN_IF_ERROR(ValidateMeta(meta));
  return Fill(dtype, std::move(size), v);
}

absl::StatusOr<PreparedOp> PrepareEmpty(const NodeArgs& args) {
  // (size, *, dtype=None, layout, device, pin_memory, memory_format): the
  // values are undefined in ATen; here they are zeros, so a graph that
  // reads one it never wrote still gives the same answer every run.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(0, "size"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", DType::kF32));
  for (int64_t s : size) {
    if (s < 0) return args.Error(absl::StrCat("negative size in ", ShapeString(size)));
  }
  TensorMeta meta{dtype, size};
  KILN_RETURN_IF_ERROR(ValidateMeta(meta));
  return Fill(dtype, std::move(size), Number{});
}

absl::StatusOr<PreparedOp> PrepareScalarTensor(const NodeArgs& args) {
  // (s, *, dtype=None, layout, device, pin_memory): default dtype f32.
  KILN_ASSIGN_OR_RETURN(Number v, ReadNumber(args, 0, "s"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", DType::kF32));
  return Fill(dtype, {}, v);
}

}  // namespace kiln::runtime
