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
//   "channel_affine"      x * scale[c] + shift[c] per output channel c, from
//                         the op's channel_scale and channel_shift tensors:
//                         an inference batch norm after an activation
//                         (kiln.conv2d only; oneDNN binary mul and add)
#pragma once

#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "absl/status/statusor.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

struct PostOp {
  enum class Kind { kAdd, kEltwise, kChannelAffine };
  Kind kind = Kind::kEltwise;
  dnnl::algorithm algorithm = dnnl::algorithm::undef;
  float alpha = 0.f;
  float beta = 0.f;
  std::string text;  // as written in the graph, for dumps
};

// Parses one post-op string; INVALID_ARGUMENT for anything unknown.
absl::StatusOr<PostOp> ParsePostOp(const std::string& text);

// Reads the list argument at (pos, name); absent means no post-ops. A
// "channel_affine" is an error unless the op takes its tensors
// (`channel_affine`).
absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, int pos,
                                                 const char* name, bool channel_affine = false);
inline absl::StatusOr<std::vector<PostOp>> ParsePostOps(const NodeArgs& args, ArgSlot a,
                                                        bool channel_affine = false) {
  return ParsePostOps(args, static_cast<int>(a.pos), a.name, channel_affine);
}

// The oneDNN post-op chain. "add" becomes a sum post-op: the kernel places
// the residual in the destination before running the primitive (a binary
// post-op whose operand layout differs from the destination's sends oneDNN
// to its reference implementation). "channel_affine" becomes a binary mul
// and a binary add over `channels` values ([1, channels, 1, 1]), whose
// operands the kernel passes at the indices DnnlChannelAffineIndex gives.
dnnl::post_ops ToDnnlPostOps(const std::vector<PostOp>& ops, int64_t channels = 0);

// The position in ToDnnlPostOps' chain of the binary mul of the first
// "channel_affine" (its add follows), or -1 when there is none.
int DnnlChannelAffineIndex(const std::vector<PostOp>& ops);

// The oneDNN descriptor of a channel_affine operand.
dnnl::memory::desc ChannelAffineDesc(int64_t channels);

}  // namespace kiln::runtime
