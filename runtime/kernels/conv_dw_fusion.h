// kiln.conv2d_dw: a 1x1 convolution and the 3x3 depthwise convolution
// reading its output (stride 1 or 2, padding 1; the expand + depthwise
// pair of mobilenet-style inverted residual blocks) as one oneDNN
// primitive, the depthwise convolution being a "dw" post-op of the 1x1
// one. Where oneDNN fuses them for real (on AVX2, its jit_1x1 kernel) the
// expanded intermediate tensor is produced and consumed a few rows at a
// time in cache instead of going through memory.
//
//   kiln.conv2d_dw(input, weight, bias?, post_ops, dw_weight, dw_bias?,
//                  dw_stride, dw_post_ops, layout=kNhwc)
//
// input and output are both in `layout` (an ActivationLayout, channels-last
// or blocked: the pass fuses only pairs whose input and output are in the
// graph's activation layout); weight [M, C, 1, 1], dw_weight
// [M, 1, 3, 3] and the biases are constants (prepacked at prepare time).
// post_ops / dw_post_ops are eltwise post-op strings (kernels/post_ops.h;
// no "add") applied after each convolution.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/ir/compile_options.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/post_ops.h"

namespace kiln::runtime {

struct DwFusionShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t m = 0;                       // channels of the 1x1 output
  int64_t dw_stride = 1;
  ActivationLayout layout = ActivationLayout::kNhwc;
};

// Whether compiling the pair as kiln.conv2d_dw pays on this CPU: oneDNN
// offers a fused kernel for it (not its reference implementation, which
// runs the two convolutions one after the other) and the intermediate
// tensor is large enough for keeping it in cache to beat the two separate
// convolutions (kMinIntermediateBytes, from timing both on AVX2: below it
// the fused kernel was slower, by up to twice). Call inside the compile's
// task arena:
// oneDNN's choice depends on the threads it sees.
bool DepthwiseFusionPays(const DwFusionShape& shape, const std::vector<PostOp>& post_ops,
                         const std::vector<PostOp>& dw_post_ops, const CompileOptions& options);

}  // namespace kiln::runtime
