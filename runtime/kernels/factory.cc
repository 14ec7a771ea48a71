// Tensors made from literals: aten.arange.start_step, aten.full.default,
// aten.full_like.default, aten.scalar_tensor.default, aten.empty.memory_format
// and aten.empty_permuted.default (any dtype). Layout, device, pin_memory
// and memory_format do not change the values (the client gives outputs
// eager's strides). Their values are computed
// at prepare time; Run() copies (or, for large fills, broadcasts) them.
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>

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

// The element bits of `v` as dtype d, converted as ATen's fill converts
// a number (dtype_convert.h).
uint64_t Bits(const Number& v, DType d) {
  uint64_t bits = 0;
  VisitDType(d, [&](auto tag) {
    using T = decltype(tag);
    const T x = v.is_float ? ConvertElement<T>(v.f) : ConvertElement<T>(v.i);
    std::memcpy(&bits, &x, sizeof(x));
  });
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
      DTypeArgOr(args, -1, "dtype", any_float ? DType::kF32 : DType::kI64, kAllDTypes));
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
  // ATen's CPU kernel: start + step * i in the dtype's accumulation type
  // (i64 for integers, f32 for the 16-bit floats, f64 for f32 and f64),
  // with start and step first converted to it, then converted to the dtype.
  std::vector<char> data(n * ElementSize(dtype));
  VisitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t,
                                   std::conditional_t<kIsHalfLike<T>, float, double>>;
    auto acc = [](const Number& x) {
      return x.is_float ? ConvertElement<Acc>(x.f) : ConvertElement<Acc>(x.i);
    };
    const Acc first = acc(start), delta = acc(step);
    T* out = reinterpret_cast<T*>(data.data());
    for (int64_t i = 0; i < n; ++i) {
      Acc v;
      if constexpr (std::is_integral_v<Acc>) {  // wraps as ATen's does, without UB
        v = static_cast<Acc>(static_cast<uint64_t>(first) +
                             static_cast<uint64_t>(delta) * static_cast<uint64_t>(i));
      } else {
        v = first + delta * static_cast<Acc>(i);
      }
      out[i] = ConvertElement<T>(v);
    }
  });
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
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", inferred, kAllDTypes));
  for (int64_t s : size) {
    if (s < 0) return args.Error(absl::StrCat("negative size in ", ShapeString(size)));
  }
  TensorMeta meta{dtype, size};
  KILN_RETURN_IF_ERROR(ValidateMeta(meta));
  return Fill(dtype, std::move(size), v);
}

absl::StatusOr<PreparedOp> PrepareFullLike(const NodeArgs& args) {
  // (self, fill_value, *, dtype=None, layout, device, pin_memory,
  //  memory_format): self's shape, the `dtype` kwarg else self's dtype.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(Number v, ReadNumber(args, 1, "fill_value"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", self.dtype, kAllDTypes));
  return Fill(dtype, self.shape, v);
}

absl::StatusOr<PreparedOp> PrepareEmpty(const NodeArgs& args) {
  // (size, *, dtype=None, layout, device, pin_memory, memory_format): the
  // values are undefined in ATen; here they are zeros, so a graph that
  // reads one it never wrote still gives the same answer every run.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(0, "size"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", DType::kF32, kAllDTypes));
  for (int64_t s : size) {
    if (s < 0) return args.Error(absl::StrCat("negative size in ", ShapeString(size)));
  }
  TensorMeta meta{dtype, size};
  KILN_RETURN_IF_ERROR(ValidateMeta(meta));
  return Fill(dtype, std::move(size), Number{});
}

absl::StatusOr<PreparedOp> PrepareEmptyPermuted(const NodeArgs& args) {
  // (size, physical_layout, *, dtype=None, layout, device, pin_memory): as
  // empty; the physical layout only orders the strides, which the client
  // gives the output.
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> size, args.IntList(0, "size"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> layout, args.IntList(1, "physical_layout"));
  std::vector<bool> seen(size.size(), false);
  bool permutation = layout.size() == size.size();
  for (int64_t d : layout) {
    permutation = permutation && d >= 0 && d < static_cast<int64_t>(size.size()) && !seen[d];
    if (permutation) seen[d] = true;
  }
  if (!permutation) {
    return args.Error(absl::StrCat("physical_layout ", ShapeString(layout),
                                   " must be a permutation of the dims of ", ShapeString(size)));
  }
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", DType::kF32, kAllDTypes));
  for (int64_t s : size) {
    if (s < 0) return args.Error(absl::StrCat("negative size in ", ShapeString(size)));
  }
  KILN_RETURN_IF_ERROR(ValidateMeta(TensorMeta{dtype, size}));
  return Fill(dtype, std::move(size), Number{});
}

absl::StatusOr<PreparedOp> PrepareScalarTensor(const NodeArgs& args) {
  // (s, *, dtype=None, layout, device, pin_memory): default dtype f32.
  KILN_ASSIGN_OR_RETURN(Number v, ReadNumber(args, 0, "s"));
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, -1, "dtype", DType::kF32, kAllDTypes));
  return Fill(dtype, {}, v);
}

}  // namespace kiln::runtime
