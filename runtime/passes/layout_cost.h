// The layout pass's cost model (passes/channels_last.cc): which activation
// layout a graph's convolutions, and the reorders each layout leaves,
// run fastest in.
#pragma once

#include <functional>

#include "runtime/ir/graph.h"
#include "runtime/kernels/activation_layout.h"

namespace kiln::runtime::channels_last {

using Layout = ActivationLayout;

struct LayoutCost {
  double nhwc = 0, blocked = 0;  // estimated seconds
};

// One kiln.conv2d's estimated time in each layout (zero for a node it
// cannot read).
LayoutCost EstimateConv(const Graph& g, const Node& node);

// The graph's activation layout for layout=auto on a CPU without AVX-512:
// the blocked layout when the convolutions' estimated time in it, plus the
// reorders it leaves, beats the same sum for NHWC by a margin.
//
// The rates and ratios below are per-shape estimates from timing both
// layouts (oneDNN 3.2 on AVX2, 2 threads, bench/kernels/
// conv_layout_bench.cc): 1x1 convolutions run faster blocked (jit_1x1
// instead of brgconv_1x1); depthwise ones faster on large maps, most at
// batch 8, and slower on 7x7 maps; dense 3x3 ones are even at 64 channels
// and slower blocked (jit instead of brgconv) from 128 on; a first layer
// reading an RGB image is faster blocked. Rerun the benchmark when oneDNN
// changes: the constants are its results.
// `reorder_bytes(layout)`: the bytes a run moves in reorders when the
// graph is compiled in `layout` (the pass finds them by rewriting a copy).
// The graph's layout option, when not auto, decides; so does a CPU with
// AVX-512 kernels (NHWC).
Layout ChooseLayout(const Graph& g, const std::function<double(Layout)>& reorder_bytes);

}  // namespace kiln::runtime::channels_last
