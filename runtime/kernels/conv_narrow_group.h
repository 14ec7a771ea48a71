// Grouped convolutions with narrow groups: as many output as input
// channels per group, 4 or 8 of them (ResNeXt-50 32x4d's first stage: 128
// channels in 32 groups of 4; RegNet's groups of 8). oneDNN's direct
// kernels work on 8-channel blocks, so it computes groups of 4 as a gemm
// per group over an im2col copy, at a small fraction of the FMA peak:
// resnext50's 56x56 3x3 convolutions were a large share of the model.
//
// The kernel here computes them directly on channels-last activations: a
// vector holds 8 output channels (two groups of 4, or one of 8), and each
// input channel of a group is spread across its group's lanes (an in-lane
// shuffle, or a broadcast load), so every multiply-add does useful work.
// bench/kernels BM_GroupedConv3x3 compares it with oneDNN
// (KILN_NARROW_GROUPS=0): the gain is large for groups of 4, which oneDNN
// runs as gemms, and small for groups of 8, which it blocks natively.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/post_ops.h"

namespace kiln::runtime {

// A convolution the narrow-group kernel may take: shapes in NCHW terms.
struct NarrowGroupConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0, oc = 0, oh = 0, ow = 0, kh = 0, kw = 0, groups = 1;
  std::array<int64_t, 2> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  ActivationLayout layout_in = ActivationLayout::kPlain;
  ActivationLayout layout_out = ActivationLayout::kPlain;
};

// Channels per group (in and out) the kernel computes.
inline constexpr std::array<int64_t, 2> kNarrowGroupWidths = {4, 8};

// Whether the kernel takes this convolution: as many output as input
// channels per group, one of kNarrowGroupWidths, channels-last on both sides, f32, a constant
// weight, output channels a multiple of 8, and post-ops that are residual
// adds or activations kernels/post_op_loops.h implements. Any kernel size,
// stride, padding and dilation. KILN_NARROW_GROUPS=0 in the daemon's
// environment turns the kernel off (for comparisons).
bool NarrowGroupApplies(const NarrowGroupConvShape& s, bool constant_weight, bool f32_compute,
                        const std::vector<PostOp>& post_ops);

// The kernel for a convolution NarrowGroupApplies to: `weight` is the
// constant [OC, C / groups, KH, KW] weight (repacked here, once), `bias` a constant
// bias (copied) or nullptr when it is absent or computed; the inputs'
// slots are the node's (bias_index and residual_index -1 when absent).
// The output may share the residual's bytes.
std::unique_ptr<Kernel> MakeNarrowGroupConv(const NarrowGroupConvShape& s, const float* weight,
                                            const float* bias, int input_index, int bias_index,
                                            int residual_index, std::vector<PostOp> post_ops);

}  // namespace kiln::runtime
