// Dtype-generic binary elementwise kernels (f32, i64, bool) with PyTorch's
// broadcasting and type promotion, shared by binary_math.cc (arithmetic)
// and compare_select.cc (comparisons).
//
// Promotion: with only f32, i64 and bool the result type of any mix of
// tensors, 0-d tensors and Python numbers is the highest category present
// (bool < int < float): an int scalar lifts a bool tensor to i64, a float
// scalar lifts an i64 tensor to f32, and f32 stays f32 whatever joins it.
// Inputs whose dtype differs from the compute type are converted into
// scratch first, so each kernel instance runs one element type.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/kernels/dtype_convert.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/strided_loop.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// A tensor input or a Python number of an elementwise op.
struct Operand {
  bool is_tensor = false;
  TensorMeta meta;     // tensor
  int slot = -1;       // tensor: index in KernelContext::inputs
  DType dtype = DType::kInvalid;  // tensor dtype; scalar: kF32/kI64/kBool
  double f = 0.0;      // scalar value (float scalars)
  int64_t i = 0;       // scalar value (int and bool scalars)

  std::vector<int64_t> shape() const {
    return is_tensor ? meta.shape : std::vector<int64_t>{};
  }
};

// Reads argument (pos, name) as a tensor or number; INVALID_ARGUMENT for
// anything else, UNIMPLEMENTED for tensor dtypes outside f32/i64/bool
// (and i32 where the caller's kernels take it: `allow_i32`).
absl::StatusOr<Operand> ReadOperand(const NodeArgs& args, int pos,
                                    const char* name, bool allow_i32 = false);

// The dtype argument (pos, name) if given, else `def`; UNIMPLEMENTED for
// element types outside `supported` (by default the elementwise kernels'
// f32/i64/bool).
absl::StatusOr<DType> DTypeArgOr(const NodeArgs& args, int pos, const char* name, DType def,
                                 DTypeMask supported = kF32I64Bool);

// bool < i64 < f32.
DType PromoteTypes(DType a, DType b);

// ATen's result type of operands that may include i32: the highest
// category (bool < integer < float) wins; within it, tensors with dims
// outrank 0-d tensors, which outrank numbers, and the widest dtype of the
// highest-ranked operands is taken (i32 tensor * 2 stays i32; i32 tensor
// + i64 tensor is i64). Without i32 operands it equals PromoteTypes.
DType PromoteOperands(const std::vector<const Operand*>& ops);

// The broadcast output shape of the operands, INVALID_ARGUMENT naming
// them when they do not broadcast.
absl::StatusOr<std::vector<int64_t>> BroadcastOperands(
    const NodeArgs& args, const std::vector<const Operand*>& ops);

// The operand's scalar value converted to C.
template <typename C>
C ScalarAs(const Operand& op) {
  if (op.dtype == DType::kF32) return ConvertElement<C>(op.f);
  if (op.dtype == DType::kBool) return ConvertElement<C>(op.i != 0);
  return ConvertElement<C>(op.i);
}

// Where each operand's data comes from at run time.
struct OperandSource {
  int slot = -1;                   // tensor input, or -1 for a scalar
  DType from = DType::kInvalid;    // its dtype (converted when != compute)
  int64_t numel = 0;
  size_t scratch_offset = 0;       // where the converted copy goes
  bool convert = false;
};

// Builds sources for tensors; returns scratch bytes for conversions of
// elements of size `compute_size`.
size_t PlanOperandSources(const std::vector<const Operand*>& ops,
                          DType compute, std::vector<OperandSource>* out);

// Pointer to operand k's data as C: the input itself, its converted copy
// in scratch, or the scalar.
template <typename C>
const C* OperandData(const OperandSource& s, const C* scalar,
                     const KernelContext& ctx, DType compute) {
  if (s.slot < 0) return scalar;
  const void* data = ctx.inputs[s.slot].data;
  if (!s.convert) return static_cast<const C*>(data);
  void* dst = static_cast<char*>(ctx.scratch) + s.scratch_offset;
  ConvertElements(s.from, data, compute, dst, s.numel);
  return static_cast<const C*>(dst);
}

// out = f(a, b) over the broadcast of two operands, in compute type C,
// writing O (C, or bool for comparisons).
template <typename C, typename O, typename F>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(StridedPlan plan, std::vector<OperandSource> src,
               C scalar_a, C scalar_b, size_t scratch, DType compute, F f)
      : plan_(std::move(plan)),
        src_(std::move(src)),
        scalar_{scalar_a, scalar_b},
        scratch_(scratch),
        compute_(compute),
        f_(f) {}

  size_t ScratchBytes() const override { return scratch_; }

  absl::Status Run(const KernelContext& ctx) const override {
    const C* a = OperandData<C>(src_[0], &scalar_[0], ctx, compute_);
    const C* b = OperandData<C>(src_[1], &scalar_[1], ctx, compute_);
    O* out = ctx.outputs[0].as<O>();
    const int64_t n = plan_.inner;
    const int64_t sa = plan_.inner_strides[0], sb = plan_.inner_strides[1];
    const F f = f_;
    ForEachRow(plan_, [&](int64_t o, const int64_t* off) {
      const C* x = a + off[0];
      const C* y = b + off[1];
      O* z = out + o;
      // One loop per stride pattern so each compiles to straight SIMD.
      if (sa == 1 && sb == 1) {
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
      } else if (sa == 1) {
        const C v = *y;
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], v);
      } else if (sb == 1) {
        const C v = *x;
        for (int64_t i = 0; i < n; ++i) z[i] = f(v, y[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * sa], y[i * sb]);
      }
    });
    return absl::OkStatus();
  }

 private:
  StridedPlan plan_;
  std::vector<OperandSource> src_;
  C scalar_[2];
  size_t scratch_;
  DType compute_;
  F f_;
};

// A BinaryKernel over operands a, b producing `out` (shape already
// broadcast) in compute type C.
template <typename C, typename O, typename F>
std::unique_ptr<Kernel> MakeBinaryKernel(const Operand& a, const Operand& b,
                                         const std::vector<int64_t>& out,
                                         DType compute, F f) {
  std::vector<OperandSource> src;
  const size_t scratch = PlanOperandSources({&a, &b}, compute, &src);
  StridedPlan plan = MakeStridedPlan(
      out, {BroadcastInputStrides(out, a.shape()),
            BroadcastInputStrides(out, b.shape())});
  const C sa = a.is_tensor ? C() : ScalarAs<C>(a);
  const C sb = b.is_tensor ? C() : ScalarAs<C>(b);
  return std::make_unique<BinaryKernel<C, O, F>>(std::move(plan),
                                                 std::move(src), sa, sb,
                                                 scratch, compute, f);
}

}  // namespace kiln::runtime
