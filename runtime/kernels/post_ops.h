// Post-operations that compile passes fuse into convolution and matmul
// kernels: a residual add and elementwise activations, applied in order to
// the primitive's output while it is still in cache (oneDNN post-ops).
//
// In the graph they are the trailing `post_ops` argument of internal fused
// ops: a list of strings, each one of
//   "add"                 add the op's `residual` tensor (same shape as the
//                         output)
//   "relu" "sigmoid" "silu" "hardswish" "hardsigmoid" "gelu_erf" "gelu_tanh"
//   "clip:<lo>:<hi>"      clamp (relu6 is clip:0:6)
//   "leaky_relu:<slope>"  leaky_relu (oneDNN eltwise_relu with alpha = slope)
#pragma once

#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/statusor.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

struct PostOp {
  enum class Kind { kAdd, kEltwise };
  Kind kind = Kind::kEltwise;
  dnnl::algorithm algorithm = dnnl::algorithm::undef;
  float alpha = 0.f;
  float beta = 0.f;
  std::string text;  // as written in the graph, for dumps
};

// Parses one post-op string; INVALID_ARGUMENT for anything unknown.
absl::StatusOr<PostOp> ParsePostOp(const std::string& text);

// Reads the list argument at (pos, name); absent means no post-ops.
absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, int pos,
                                                 const char* name);
inline absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, ArgSlot a) {
  return ParsePostOps(args, static_cast<int>(a.pos), a.name);
}

// The oneDNN post-op chain. "add" becomes a sum post-op: the kernel places
// the residual in the destination before running the primitive (a binary
// post-op whose operand layout differs from the destination's sends oneDNN
// to its reference implementation).
dnnl::post_ops ToDnnlPostOps(const std::vector<PostOp>& ops);

}  // namespace kiln::runtime
