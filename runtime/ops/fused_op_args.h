// Kiln's fused ops' arguments by name (ops.def), as the code that builds
// and reads them refers to them: conv2d_arg::kResidual is the position of
// kiln.conv2d's "residual". Each is found from the schema when Kiln is
// built (KILN_ARG), so a renamed or reordered argument fails the build.
#pragma once

#include "runtime/ops/op_table.h"

namespace kiln::runtime {


namespace addmm_arg {
inline constexpr ArgSlot kSelf = KILN_ARG("kiln.addmm", "self");
inline constexpr ArgSlot kMat1 = KILN_ARG("kiln.addmm", "mat1");
inline constexpr ArgSlot kMat2 = KILN_ARG("kiln.addmm", "mat2");
inline constexpr ArgSlot kPostOps = KILN_ARG("kiln.addmm", "post_ops");
inline constexpr ArgSlot kMat2Transposed = KILN_ARG("kiln.addmm", "mat2_transposed");
}  // namespace addmm_arg

namespace batch_norm_nhwc_arg {
inline constexpr ArgSlot kInput = KILN_ARG("kiln.batch_norm_nhwc", "input");
inline constexpr ArgSlot kWeight = KILN_ARG("kiln.batch_norm_nhwc", "weight");
inline constexpr ArgSlot kBias = KILN_ARG("kiln.batch_norm_nhwc", "bias");
inline constexpr ArgSlot kRunningMean = KILN_ARG("kiln.batch_norm_nhwc", "running_mean");
inline constexpr ArgSlot kRunningVar = KILN_ARG("kiln.batch_norm_nhwc", "running_var");
inline constexpr ArgSlot kEps = KILN_ARG("kiln.batch_norm_nhwc", "eps");
inline constexpr ArgSlot kPostOps = KILN_ARG("kiln.batch_norm_nhwc", "post_ops");
}  // namespace batch_norm_nhwc_arg

namespace conv2d_arg {
inline constexpr ArgSlot kInput = KILN_ARG("kiln.conv2d", "input");
inline constexpr ArgSlot kWeight = KILN_ARG("kiln.conv2d", "weight");
inline constexpr ArgSlot kBias = KILN_ARG("kiln.conv2d", "bias");
inline constexpr ArgSlot kStride = KILN_ARG("kiln.conv2d", "stride");
inline constexpr ArgSlot kPadding = KILN_ARG("kiln.conv2d", "padding");
inline constexpr ArgSlot kDilation = KILN_ARG("kiln.conv2d", "dilation");
inline constexpr ArgSlot kGroups = KILN_ARG("kiln.conv2d", "groups");
inline constexpr ArgSlot kResidual = KILN_ARG("kiln.conv2d", "residual");
inline constexpr ArgSlot kPostOps = KILN_ARG("kiln.conv2d", "post_ops");
inline constexpr ArgSlot kLayoutIn = KILN_ARG("kiln.conv2d", "layout_in");
static_assert(kOps[OpIndexOf("kiln.conv2d")].traits.overwrites == static_cast<int>(kResidual.pos),
              "ops.def: kiln.conv2d overwrites its residual");
inline constexpr ArgSlot kLayoutOut = KILN_ARG("kiln.conv2d", "layout_out");
// Per output channel, for the "channel_affine" post-op (post_ops.h).
inline constexpr ArgSlot kChannelScale = KILN_ARG("kiln.conv2d", "channel_scale");
inline constexpr ArgSlot kChannelShift = KILN_ARG("kiln.conv2d", "channel_shift");
}  // namespace conv2d_arg

namespace conv2d_dw_arg {
inline constexpr ArgSlot kInput = KILN_ARG("kiln.conv2d_dw", "input");
inline constexpr ArgSlot kWeight = KILN_ARG("kiln.conv2d_dw", "weight");
inline constexpr ArgSlot kBias = KILN_ARG("kiln.conv2d_dw", "bias");
inline constexpr ArgSlot kPostOps = KILN_ARG("kiln.conv2d_dw", "post_ops");
inline constexpr ArgSlot kDwWeight = KILN_ARG("kiln.conv2d_dw", "dw_weight");
inline constexpr ArgSlot kDwBias = KILN_ARG("kiln.conv2d_dw", "dw_bias");
inline constexpr ArgSlot kDwStride = KILN_ARG("kiln.conv2d_dw", "dw_stride");
inline constexpr ArgSlot kDwPostOps = KILN_ARG("kiln.conv2d_dw", "dw_post_ops");
inline constexpr ArgSlot kLayout = KILN_ARG("kiln.conv2d_dw", "layout");
}  // namespace conv2d_dw_arg

namespace interleave_channels_arg {
inline constexpr ArgSlot kA = KILN_ARG("kiln.interleave_channels", "a");
inline constexpr ArgSlot kB = KILN_ARG("kiln.interleave_channels", "b");
inline constexpr ArgSlot kSplitSizes = KILN_ARG("kiln.interleave_channels", "split_sizes");
}  // namespace interleave_channels_arg

namespace squeeze_excite_arg {
inline constexpr ArgSlot kX = KILN_ARG("kiln.squeeze_excite", "x");
inline constexpr ArgSlot kW1 = KILN_ARG("kiln.squeeze_excite", "w1");
inline constexpr ArgSlot kB1 = KILN_ARG("kiln.squeeze_excite", "b1");
inline constexpr ArgSlot kW2 = KILN_ARG("kiln.squeeze_excite", "w2");
inline constexpr ArgSlot kB2 = KILN_ARG("kiln.squeeze_excite", "b2");
inline constexpr ArgSlot kPostOps1 = KILN_ARG("kiln.squeeze_excite", "post_ops1");
inline constexpr ArgSlot kPostOps2 = KILN_ARG("kiln.squeeze_excite", "post_ops2");
inline constexpr ArgSlot kLayout = KILN_ARG("kiln.squeeze_excite", "layout");
}  // namespace squeeze_excite_arg

}  // namespace kiln::runtime
