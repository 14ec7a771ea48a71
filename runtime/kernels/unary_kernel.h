// One pass of a stateless elementwise functor over a flat tensor, in
// parallel chunks: the kernel of the elementwise math ops that have no
// vector form (unary_math.cc, special_math.cc).
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/op_def.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

// Elements per parallel chunk: enough that scheduling is noise.
inline constexpr int64_t kUnaryGrain = int64_t{1} << 14;

// T -> T through f (f32 by default; i64 for the integer forms).
template <typename F, typename T = float>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(int64_t n, F f) : n_(n), f_(f) {}

  absl::Status Run(const KernelContext& ctx) const override {
    const T* in = ctx.inputs[0].template as<const T>();
    T* out = ctx.outputs[0].template as<T>();
    const F f = f_;
    ParallelFor(n_, kUnaryGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[i] = f(in[i]);
    });
    return absl::OkStatus();
  }

 private:
  int64_t n_;
  F f_;
};

// An op whose output is its one f32 tensor argument (pos, name) through f.
template <typename F>
absl::StatusOr<PreparedOp> Unary(const NodeArgs& args, F f, int pos = 0,
                                 const char* name = "self") {
  KILN_ASSIGN_OR_RETURN(TensorMeta self, args.Tensor(pos, name));
  KILN_RETURN_IF_ERROR(RequireDType(args, self, name));
  PreparedOp op;
  op.outputs.push_back(self);
  op.kernel = std::make_unique<UnaryKernel<F>>(self.NumElements(), f);
  return op;
}

}  // namespace kiln::runtime
