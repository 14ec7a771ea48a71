// 3x3 stride-1 convolutions by Winograd's minimal filtering F(2x2, 3x3):
// each 2x2 block of outputs comes from a 4x4 block of inputs with 16
// multiplications per channel pair instead of 36, so the convolution
// becomes 16 independent matrix products [tiles, C] @ [C, OC] (one batched
// oneDNN matmul) between an input and an output transform of Kiln's own.
// oneDNN 3.x has no f32 Winograd kernel on x86; on the medium spatial sizes
// of a UNet or a ResNet its direct kernels stay well below the FMA peak,
// and 2.25x fewer products more than pay for the two transforms.
//
// The transforms' coefficients are 0, +-1 and +-1/2, so the result differs
// from a direct convolution by a few float roundings (tests hold it to the
// same 1e-4 as the direct kernels).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/kernel.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

// A convolution the Winograd kernel may take: shapes in NCHW terms.
struct WinogradConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0, oc = 0, oh = 0, ow = 0;
  int64_t pad_h = 0, pad_w = 0;
  ActivationLayout layout_in = ActivationLayout::kPlain;
  ActivationLayout layout_out = ActivationLayout::kPlain;
};

// Whether F(2x2, 3x3) computes this convolution and should beat oneDNN's
// direct kernel: 3x3 weights, stride and dilation 1, one group, padding of
// at most 2, f32, plain or channels-last activations, a constant weight,
// channel counts that are multiples of 8 (at least 32) and enough 2x2
// tiles to keep the products busy. `post_ops` must be residual adds and
// activations kernels/post_op_loops.h implements. KILN_WINOGRAD=0 in the
// daemon's environment turns the kernel off (for comparisons).
bool WinogradApplies(const WinogradConvShape& s, int64_t kh, int64_t kw,
                     const std::array<int64_t, 2>& stride,
                     const std::array<int64_t, 2>& dilation, int64_t groups,
                     bool constant_weight, bool f32_compute, const std::vector<PostOp>& post_ops);

// The kernel for a node WinogradApplies to: `weight` is the constant OIHW
// weight (transformed and packed here, once), `bias` a constant bias
// (copied) or nullptr when the bias is absent or computed; the inputs'
// slots are the node's (bias_index and residual_index -1 when absent).
absl::StatusOr<std::unique_ptr<Kernel>> MakeWinogradConv(
    const NodeArgs& args, const WinogradConvShape& s, const float* weight, const float* bias,
    int input_index, int bias_index, int residual_index, std::vector<PostOp> post_ops);

}  // namespace kiln::runtime
