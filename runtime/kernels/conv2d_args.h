// Argument positions of kiln.conv2d, the fused convolution the compile
// passes build (passes/fuse_conv_post_ops.cc) and kernels/convolution.cc
// runs: (input, weight, bias, stride, padding, dilation, groups, residual,
// post_ops, layout_in, layout_out). One list for every pass and stage
// that reads them.
#pragma once

#include <cstddef>

namespace kiln::runtime::conv2d_args {

enum Position : size_t {
  kInput = 0, kWeight, kBias, kStride, kPadding, kDilation, kGroups, kResidual, kPostOps,
  kLayoutIn, kLayoutOut, kNumArgs
};

}  // namespace kiln::runtime::conv2d_args
