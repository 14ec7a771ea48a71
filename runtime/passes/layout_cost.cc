#include "runtime/passes/layout_cost.h"

#include <cstdint>

#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/op_table.h"

namespace kiln::runtime::channels_last {

LayoutCost EstimateConv(const Graph& g, const Node& node) {
  LayoutCost cost;
  if (node.args.size() <= conv2d_arg::kGroups.pos ||
      node.args[conv2d_arg::kInput.pos].kind != Arg::Kind::kTensor ||
      node.args[conv2d_arg::kWeight.pos].kind != Arg::Kind::kTensor || node.outputs.empty()) {
    return cost;
  }
  const TensorMeta& in = g.MetaOf(node.args[conv2d_arg::kInput.pos].tensor);
  const TensorMeta& w = g.MetaOf(node.args[conv2d_arg::kWeight.pos].tensor);
  const TensorMeta& out = node.outputs[0];
  if (in.rank() != 4 || w.rank() != 4 || out.rank() != 4) return cost;
  const Arg& groups_arg = node.args[conv2d_arg::kGroups.pos];
  const int64_t groups = groups_arg.kind == Arg::Kind::kInt ? groups_arg.i : 1;
  const double flops = 2.0 * static_cast<double>(out.NumElements()) * w.shape[1] * w.shape[2] *
                       w.shape[3];
  const int64_t c = in.shape[1], hw = out.shape[2] * out.shape[3];
  double gflops, ratio;  // NHWC rate on 2 cores; blocked time / NHWC time
  if (groups > 1 && groups == c && w.shape[1] == 1) {
    gflops = 20;
    ratio = hw >= 28 * 28 ? (out.shape[0] > 1 ? 0.5 : 0.82) : (hw >= 14 * 14 ? 0.9 : 1.2);
  } else if (groups > 1 &&
             (w.shape[1] % kChannelBlock != 0 || (w.shape[0] / groups) % kChannelBlock != 0)) {
    // Groups narrower than a block have no blocked kernel on AVX2: oneDNN
    // falls back to its reference one: resnext50_32x4d's 4-channel groups
    // made a single blocked convolution slower than the whole model in
    // NHWC, so the ratio is prohibitive.
    gflops = 60;
    ratio = 50;
  } else if (w.shape[2] == 1 && w.shape[3] == 1) {
    gflops = 55;
    ratio = 0.85;
  } else if (c % kChannelBlock != 0) {
    gflops = 60;
    ratio = 0.8;
  } else {
    gflops = 60;
    ratio = c >= 128 ? 1.25 : 0.95;
  }
  cost.nhwc = flops / (gflops * 1e9);
  cost.blocked = cost.nhwc * ratio;
  return cost;
}

Layout ChooseLayout(const Graph& g, const std::function<double(Layout)>& reorder_bytes) {
  if (g.options.layout == LayoutOption::kNhwc) return Layout::kNhwc;
  if (g.options.layout == LayoutOption::kBlocked) return Layout::kBlocked;
  if (HasAvx512Kernels()) return Layout::kNhwc;
  LayoutCost total;
  for (const Node& node : g.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp || node.target != "kiln.conv2d") continue;
    const LayoutCost cost = EstimateConv(g, node);
    total.nhwc += cost.nhwc;
    total.blocked += cost.blocked;
  }
  // Reorders and conversions are bound by memory (the rate, read + write,
  // is one measured on the AVX2 hosts); a blocked one (an 8-float inner
  // transpose) is no faster.
  constexpr double kReorderBytesPerSecond = 5e9;
  total.nhwc += reorder_bytes(Layout::kNhwc) / kReorderBytesPerSecond;
  total.blocked += reorder_bytes(Layout::kBlocked) / kReorderBytesPerSecond;
  // A margin: small differences are within the estimates' error, and
  // NHWC is the layout every op of the pass has a form in.
  return total.blocked < 0.9 * total.nhwc ? Layout::kBlocked : Layout::kNhwc;
}

}  // namespace kiln::runtime::channels_last
