// Window arithmetic shared by the pooling kernels: 2-D in NCHW
// (pooling.cc) and channels-last (pooling_nhwc.cc) order, and 3-D
// (pooling3d.cc): ATen's output size rule, ceil_mode, adaptive windows and
// the argument checks of pool2d_shape_check.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {

struct PoolGeometry {
  int64_t planes = 0;  // N * C (NCHW kernels pool every plane on its own)
  int64_t ih = 0, iw = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// Grain in planes so each task does at least ~16K output elements.
int64_t PlaneGrain(const PoolGeometry& g);

// ATen's pooling_output_shape.
int64_t PoolOutputSize(int64_t in, int64_t k, int64_t pad, int64_t stride,
                       int64_t dilation, bool ceil_mode);

// ATen's adaptive window of output index o along a dim of `in` elements
// pooled to `out`: [floor(o*in/out), ceil((o+1)*in/out)).
inline int64_t AdaptiveStart(int64_t o, int64_t in, int64_t out) { return o * in / out; }
inline int64_t AdaptiveEnd(int64_t o, int64_t in, int64_t out) {
  return ((o + 1) * in + out - 1) / out;
}

// Reads kernel_size/stride/padding(/dilation) at positions 1..4, checks them
// like ATen's pool2d_shape_check and computes the output size from g->ih
// and g->iw.
absl::Status ReadWindow(const NodeArgs& args, bool has_dilation,
                        bool ceil_mode, PoolGeometry* g);

}  // namespace kiln::runtime
