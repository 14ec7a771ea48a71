// Reductions over any set of dims (reduce_plan.h), by their ATen
// semantics: aten.sum.dim_IntList of i64 and bool tensors (f32 sums are
// reduce.cc's, with the mean's vectorized loops), aten.prod (whole tensor
// and one dim), aten.amax and aten.amin, aten.max/min (whole tensor, and
// one dim with indices), aten.argmax and aten.argmin, aten.var.correction
// and aten.var_mean.correction, aten.any (whole tensor and dims).
//
// NaN: max, min, amax and amin give NaN when any element is NaN, and the
// index ops point at the first NaN, as ATen's CPU kernels do; ties give
// the first index. Floating sums and products accumulate in double.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/element_nan.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/reduce_plan.h"
#include "runtime/kernels/typed_elementwise.h"
#include "runtime/ops/prepare_fns.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

absl::StatusOr<ReductionPlan> PlanReduction(const NodeArgs& args, const TensorMeta& self,
                                            const std::optional<std::vector<int64_t>>& dims,
                                            bool keepdim, bool empty_means_all) {
  const int rank = self.rank();
  std::vector<bool> reduce(rank, false);
  if (!dims || (dims->empty() && empty_means_all)) {
    std::fill(reduce.begin(), reduce.end(), true);
  } else {
    for (int64_t d : *dims) {
      KILN_ASSIGN_OR_RETURN(int w, WrapDim(args, d, rank));
      if (rank == 0) continue;  // a scalar's dim 0 / -1 reduces nothing
      if (reduce[w]) {
        return args.Error(absl::StrCat("dim ", w, " appears twice in ", ShapeString(*dims)));
      }
      reduce[w] = true;
    }
  }
  ReductionPlan p;
  p.count = 1;
  std::vector<int64_t> strides(rank);
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    strides[d] = s;
    s *= self.shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    if (reduce[d]) {
      p.count *= self.shape[d];
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.out_shape.push_back(self.shape[d]);
    }
    if (self.shape[d] == 1) continue;  // no effect on offsets
    auto& sizes = reduce[d] ? p.red_sizes : p.kept_sizes;
    auto& strd = reduce[d] ? p.red_strides : p.kept_strides;
    if (!sizes.empty() && strd.back() == self.shape[d] * strides[d]) {
      sizes.back() *= self.shape[d];  // chains with the previous dim of its kind
      strd.back() = strides[d];
    } else {
      sizes.push_back(self.shape[d]);
      strd.push_back(strides[d]);
    }
  }
  if (p.red_sizes.size() > 16) return args.Unimplemented("more than 16 separate reduced dims");
  p.out_numel = Product(p.out_shape, 0, static_cast<int>(p.out_shape.size()));
  return p;
}

namespace {

// Work per task: about this many input elements.
constexpr int64_t kWork = int64_t{1} << 15;

// out[o] = Finish(fold of Step over the reduced elements), per output.
// R supplies: using Acc; Acc Init(); void Step(Acc&, In, int64_t r);
// Out Finish(const Acc&, int64_t count).
template <typename In, typename Out, typename R>
class FoldKernel final : public Kernel {
 public:
  FoldKernel(ReductionPlan p, R r) : p_(std::move(p)), r_(r) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const In* in = ctx.inputs[0].as<const In>();
    Out* out = ctx.outputs[0].as<Out>();
    const int64_t grain = std::max<int64_t>(1, kWork / std::max<int64_t>(1, p_.count));
    ParallelFor(p_.out_numel, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        auto acc = r_.Init();
        p_.ForEachReduced(p_.Base(o), [&](int64_t r, int64_t off) { r_.Step(acc, in[off], r); });
        out[o] = r_.Finish(acc, p_.count);
      }
    });
    return absl::OkStatus();
  }

 private:
  ReductionPlan p_;
  R r_;
};

// The same with two outputs (values, i64 indices): max.dim and min.dim.
template <typename In, typename R>
class FoldWithIndexKernel final : public Kernel {
 public:
  FoldWithIndexKernel(ReductionPlan p, R r) : p_(std::move(p)), r_(r) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const In* in = ctx.inputs[0].as<const In>();
    In* values = ctx.outputs[0].as<In>();
    int64_t* indices = ctx.outputs[1].as<int64_t>();
    const int64_t grain = std::max<int64_t>(1, kWork / std::max<int64_t>(1, p_.count));
    ParallelFor(p_.out_numel, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        auto acc = r_.Init();
        p_.ForEachReduced(p_.Base(o), [&](int64_t r, int64_t off) { r_.Step(acc, in[off], r); });
        values[o] = acc.value;
        indices[o] = acc.index;
      }
    });
    return absl::OkStatus();
  }

 private:
  ReductionPlan p_;
  R r_;
};

template <typename In, typename Acc, typename Out>
struct SumR {
  Acc Init() const { return Acc(0); }
  void Step(Acc& a, In x, int64_t) const { a += static_cast<Acc>(x); }
  Out Finish(const Acc& a, int64_t) const { return static_cast<Out>(a); }
};

template <typename In, typename Acc, typename Out>
struct ProdR {
  Acc Init() const { return Acc(1); }
  void Step(Acc& a, In x, int64_t) const {
    if constexpr (std::is_integral_v<Acc>) {
      // Wraps on overflow, as ATen's int64 product does.
      a = static_cast<Acc>(static_cast<uint64_t>(a) * static_cast<uint64_t>(x));
    } else {
      a *= static_cast<Acc>(x);
    }
  }
  Out Finish(const Acc& a, int64_t) const { return static_cast<Out>(a); }
};

// Extremum with its first index; a NaN wins and stays.
template <typename T, bool kMax>
struct ExtremeR {
  struct Acc {
    T value;
    int64_t index;
    bool any;
  };
  Acc Init() const { return {T(), 0, false}; }
  void Step(Acc& a, T x, int64_t r) const {
    if (a.any && IsNan(a.value)) return;
    const bool better = kMax ? x > a.value : x < a.value;
    if (!a.any || IsNan(x) || better) a = {x, r, true};
  }
  T Finish(const Acc& a, int64_t) const { return a.value; }
};

template <typename T, bool kMax>
struct ArgExtremeR {
  using Base = ExtremeR<T, kMax>;
  Base base;
  typename Base::Acc Init() const { return base.Init(); }
  void Step(typename Base::Acc& a, T x, int64_t r) const { base.Step(a, x, r); }
  int64_t Finish(const typename Base::Acc& a, int64_t) const { return a.index; }
};

struct AnyR {
  bool Init() const { return false; }
  template <typename T>
  void Step(bool& a, T x, int64_t) const { a = a || x != T(0); }
  bool Finish(const bool& a, int64_t) const { return a; }
};

// Variance in one pass: Welford's update of the running mean and squared
// deviation, in double. A non-positive dof divides by zero as ATen does
// (NaN for 0/0, inf otherwise).
struct VarR {
  double correction;
  struct Acc {
    double mean = 0, m2 = 0;
    int64_t n = 0;
  };
  Acc Init() const { return {}; }
  void Step(Acc& a, float x, int64_t) const {
    ++a.n;
    const double d = x - a.mean;
    a.mean += d / static_cast<double>(a.n);
    a.m2 += d * (x - a.mean);
  }
  float Finish(const Acc& a, int64_t count) const {
    const double dof = std::max(0.0, static_cast<double>(count) - correction);
    return static_cast<float>(a.m2 / dof);
  }
};

// var_mean: both results of one Welford pass.
class VarMeanKernel final : public Kernel {
 public:
  VarMeanKernel(ReductionPlan p, VarR r) : p_(std::move(p)), r_(r) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const float* in = ctx.inputs[0].as<const float>();
    float* var = ctx.outputs[0].as<float>();
    float* mean = ctx.outputs[1].as<float>();
    const int64_t grain = std::max<int64_t>(1, kWork / std::max<int64_t>(1, p_.count));
    ParallelFor(p_.out_numel, grain, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        VarR::Acc acc = r_.Init();
        p_.ForEachReduced(p_.Base(o), [&](int64_t r, int64_t off) { r_.Step(acc, in[off], r); });
        var[o] = r_.Finish(acc, p_.count);
        mean[o] = p_.count == 0 ? std::numeric_limits<float>::quiet_NaN()
                                : static_cast<float>(acc.mean);
      }
    });
    return absl::OkStatus();
  }

 private:
  ReductionPlan p_;
  VarR r_;
};

template <typename In, typename Out, typename R>
PreparedOp Fold(ReductionPlan p, DType out_dtype, R r) {
  PreparedOp op;
  op.outputs.push_back(TensorMeta{out_dtype, p.out_shape});
  op.kernel = std::make_unique<FoldKernel<In, Out, R>>(std::move(p), r);
  return op;
}

absl::Status RequireNonEmpty(const NodeArgs& args, const ReductionPlan& p, const char* what) {
  if (p.count == 0 && p.out_numel > 0) {
    return args.Error(absl::StrCat(what, " of an empty dimension has no identity"));
  }
  return absl::OkStatus();
}

// The optional dtype argument of sum/prod: only the result type ATen picks
// by default (i64 for integer and bool input) or f32.
absl::StatusOr<DType> ResultDType(const NodeArgs& args, int pos, const TensorMeta& self) {
  const DType def = self.dtype == DType::kF32 ? DType::kF32 : DType::kI64;
  KILN_ASSIGN_OR_RETURN(DType dtype, DTypeArgOr(args, pos, "dtype", def));
  if (dtype == DType::kBool) return args.Unimplemented("a bool result type is not supported");
  return dtype;
}

template <template <typename, typename, typename> class R>
absl::StatusOr<PreparedOp> SumOrProd(const NodeArgs& args, const TensorMeta& self,
                                     ReductionPlan p, DType out) {
  if (out == DType::kF32) {
    if (self.dtype == DType::kF32) return Fold<float, float>(std::move(p), out, R<float, double, float>{});
    if (self.dtype == DType::kI64) return Fold<int64_t, float>(std::move(p), out, R<int64_t, double, float>{});
    return Fold<bool, float>(std::move(p), out, R<bool, double, float>{});
  }
  if (self.dtype == DType::kF32) {
    return args.Unimplemented("an integer result of a floating-point reduction is not supported");
  }
  if (self.dtype == DType::kI64) return Fold<int64_t, int64_t>(std::move(p), out, R<int64_t, int64_t, int64_t>{});
  return Fold<bool, int64_t>(std::move(p), out, R<bool, int64_t, int64_t>{});
}

template <bool kMax>
absl::StatusOr<PreparedOp> Extreme(const NodeArgs& args, const TensorMeta& self, ReductionPlan p) {
  KILN_RETURN_IF_ERROR(RequireNonEmpty(args, p, kMax ? "max" : "min"));
  switch (self.dtype) {
    case DType::kF32:
      return Fold<float, float>(std::move(p), self.dtype, ExtremeR<float, kMax>{});
    case DType::kI64:
      return Fold<int64_t, int64_t>(std::move(p), self.dtype, ExtremeR<int64_t, kMax>{});
    default:
      return Fold<bool, bool>(std::move(p), self.dtype, ExtremeR<bool, kMax>{});
  }
}

template <bool kMax>
absl::StatusOr<PreparedOp> ArgExtreme(const NodeArgs& args) {
  // (self, dim=None, keepdim=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  std::optional<std::vector<int64_t>> dims;
  if (args.Find(1, "dim") != nullptr) {
    KILN_ASSIGN_OR_RETURN(int64_t d, args.Int(1, "dim"));
    dims = std::vector<int64_t>{d};
  }
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  // Without a dim the whole tensor is flattened: keepdim keeps every dim.
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim));
  KILN_RETURN_IF_ERROR(RequireNonEmpty(args, p, kMax ? "argmax" : "argmin"));
  switch (self.dtype) {
    case DType::kF32:
      return Fold<float, int64_t>(std::move(p), DType::kI64, ArgExtremeR<float, kMax>{});
    case DType::kI64:
      return Fold<int64_t, int64_t>(std::move(p), DType::kI64, ArgExtremeR<int64_t, kMax>{});
    default:
      return Fold<bool, int64_t>(std::move(p), DType::kI64, ArgExtremeR<bool, kMax>{});
  }
}

template <bool kMax>
absl::StatusOr<PreparedOp> ExtremeDim(const NodeArgs& args) {
  // (self, dim, keepdim=False) -> (values, indices)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t d, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p,
                        PlanReduction(args, self, std::vector<int64_t>{d}, keepdim));
  KILN_RETURN_IF_ERROR(RequireNonEmpty(args, p, kMax ? "max" : "min"));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{self.dtype, p.out_shape});
  op.outputs.push_back(TensorMeta{DType::kI64, p.out_shape});
  switch (self.dtype) {
    case DType::kF32:
      op.kernel = std::make_unique<FoldWithIndexKernel<float, ExtremeR<float, kMax>>>(
          std::move(p), ExtremeR<float, kMax>{});
      break;
    case DType::kI64:
      op.kernel = std::make_unique<FoldWithIndexKernel<int64_t, ExtremeR<int64_t, kMax>>>(
          std::move(p), ExtremeR<int64_t, kMax>{});
      break;
    default:
      op.kernel = std::make_unique<FoldWithIndexKernel<bool, ExtremeR<bool, kMax>>>(
          std::move(p), ExtremeR<bool, kMax>{});
      break;
  }
  return op;
}

template <bool kMax>
absl::StatusOr<PreparedOp> AExtreme(const NodeArgs& args) {
  // (self, dim=[], keepdim=False): an empty list reduces every dim.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, args.IntList(1, "dim", {}));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim));
  return Extreme<kMax>(args, self, std::move(p));
}

template <bool kMax>
absl::StatusOr<PreparedOp> WholeExtreme(const NodeArgs& args) {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, std::nullopt, false));
  return Extreme<kMax>(args, self, std::move(p));
}

}  // namespace

absl::StatusOr<PreparedOp> PrepareIntegerSumDim(const NodeArgs& args) {
  // (self, dim: int[1]?, keepdim=False, *, dtype=None) on i64 or bool.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, args.OptionalIntList(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(DType out, ResultDType(args, 3, self));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim));
  return SumOrProd<SumR>(args, self, std::move(p), out);
}

absl::StatusOr<PreparedOp> PrepareProdDimInt(const NodeArgs& args) {
  // (self, dim, keepdim=False, *, dtype=None)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(int64_t d, args.Int(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(DType out, ResultDType(args, 3, self));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p,
                        PlanReduction(args, self, std::vector<int64_t>{d}, keepdim));
  return SumOrProd<ProdR>(args, self, std::move(p), out);
}

absl::StatusOr<PreparedOp> PrepareProd(const NodeArgs& args) {
  // (self, *, dtype=None): the product of every element.
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(DType out, ResultDType(args, 1, self));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, std::nullopt, false));
  return SumOrProd<ProdR>(args, self, std::move(p), out);
}

absl::StatusOr<PreparedOp> PrepareAmax(const NodeArgs& args) { return AExtreme<true>(args); }
absl::StatusOr<PreparedOp> PrepareAmin(const NodeArgs& args) { return AExtreme<false>(args); }
absl::StatusOr<PreparedOp> PrepareMax(const NodeArgs& args) { return WholeExtreme<true>(args); }
absl::StatusOr<PreparedOp> PrepareMin(const NodeArgs& args) { return WholeExtreme<false>(args); }
absl::StatusOr<PreparedOp> PrepareMaxDim(const NodeArgs& args) { return ExtremeDim<true>(args); }
absl::StatusOr<PreparedOp> PrepareMinDim(const NodeArgs& args) { return ExtremeDim<false>(args); }
absl::StatusOr<PreparedOp> PrepareArgmax(const NodeArgs& args) { return ArgExtreme<true>(args); }
absl::StatusOr<PreparedOp> PrepareArgmin(const NodeArgs& args) { return ArgExtreme<false>(args); }

absl::StatusOr<PreparedOp> PrepareVarCorrection(const NodeArgs& args) {
  // (self, dim: int[1]? = None, *, correction: Scalar? = None, keepdim=False)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, args.OptionalIntList(1, "dim"));
  KILN_ASSIGN_OR_RETURN(double correction, args.Float(2, "correction", 1.0));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(3, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim));
  return Fold<float, float>(std::move(p), DType::kF32, VarR{correction});
}

absl::StatusOr<PreparedOp> PrepareVarMeanCorrection(const NodeArgs& args) {
  // (self, dim: int[1]? = None, *, correction: Scalar? = None, keepdim=False)
  // -> (var, mean)
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, "self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, args.OptionalIntList(1, "dim"));
  KILN_ASSIGN_OR_RETURN(double correction, args.Float(2, "correction", 1.0));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(3, "keepdim", false));
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim));
  PreparedOp op;
  op.outputs.push_back(TensorMeta{DType::kF32, p.out_shape});
  op.outputs.push_back(TensorMeta{DType::kF32, p.out_shape});
  op.kernel = std::make_unique<VarMeanKernel>(std::move(p), VarR{correction});
  return op;
}

absl::StatusOr<PreparedOp> PrepareAny(const NodeArgs& args) {
  // aten.any.default (self) and aten.any.dims (self, dim: int[1]? = None,
  // keepdim=False): bool, true where any element is nonzero (NaN counts).
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(0, "self"));
  KILN_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> dims, args.OptionalIntList(1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, args.Bool(2, "keepdim", false));
  // any.dims with an empty list reduces nothing (unlike sum).
  KILN_ASSIGN_OR_RETURN(ReductionPlan p, PlanReduction(args, self, dims, keepdim,
                                                       /*empty_means_all=*/false));
  switch (self.dtype) {
    case DType::kF32:
      return Fold<float, bool>(std::move(p), DType::kBool, AnyR{});
    case DType::kI64:
      return Fold<int64_t, bool>(std::move(p), DType::kBool, AnyR{});
    default:
      return Fold<bool, bool>(std::move(p), DType::kBool, AnyR{});
  }
}

}  // namespace kiln::runtime
