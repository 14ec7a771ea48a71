// Fuses a 1x1 convolution and the 3x3 depthwise convolution that alone
// reads its output into kiln.conv2d_dw (kernels/conv_dw_fusion.h), where
// oneDNN has a real fused kernel for the pair and the fusion pays
// (DepthwiseFusionPays). Runs after layout propagation: only pairs whose
// input and output are all in one activation layout (channels-last or
// blocked) fuse, and the fused node carries that layout.
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/conv_dw_fusion.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// kiln.conv2d's arguments (ops.def), as positions: they read as a[kWeight].
constexpr size_t kInput = conv2d_arg::kInput.pos;
constexpr size_t kWeight = conv2d_arg::kWeight.pos;
constexpr size_t kBias = conv2d_arg::kBias.pos;
constexpr size_t kStride = conv2d_arg::kStride.pos;
constexpr size_t kPadding = conv2d_arg::kPadding.pos;
constexpr size_t kDilation = conv2d_arg::kDilation.pos;
constexpr size_t kGroups = conv2d_arg::kGroups.pos;
constexpr size_t kResidual = conv2d_arg::kResidual.pos;
constexpr size_t kPostOps = conv2d_arg::kPostOps.pos;
constexpr size_t kLayoutIn = conv2d_arg::kLayoutIn.pos;
constexpr size_t kLayoutOut = conv2d_arg::kLayoutOut.pos;

// The activation layout a kiln.conv2d layout argument names; kPlain for
// anything else.
ActivationLayout LayoutOf(const Arg& a) {
  if (a.kind != Arg::Kind::kInt) return ActivationLayout::kPlain;
  if (a.i == static_cast<int64_t>(ActivationLayout::kNhwc)) return ActivationLayout::kNhwc;
  if (a.i == static_cast<int64_t>(ActivationLayout::kBlocked)) return ActivationLayout::kBlocked;
  return ActivationLayout::kPlain;
}

// A kiln.conv2d whose input and output are both in one activation layout
// (not plain; returned in *layout), with constant weights (and bias, if
// any), no residual and only eltwise post-ops, which it returns.
bool PlainLayoutConv(const PassContext& ctx, const Node& n, std::vector<PostOp>* post_ops,
                     ActivationLayout* layout) {
  if (n.dead || n.target != "kiln.conv2d" || n.args.size() != kLayoutOut + 1 || !n.kwargs.empty()) {
    return false;
  }
  const std::vector<Arg>& a = n.args;
  if (a[kInput].kind != Arg::Kind::kTensor || a[kWeight].kind != Arg::Kind::kTensor ||
      ctx.constant_data[a[kWeight].tensor.node] == nullptr ||
      a[kResidual].kind != Arg::Kind::kNone || LayoutOf(a[kLayoutIn]) == ActivationLayout::kPlain ||
      LayoutOf(a[kLayoutIn]) != LayoutOf(a[kLayoutOut]) || !IsIntList(a[kDilation], {1, 1}) ||
      a[kGroups].kind != Arg::Kind::kInt || a[kPostOps].kind != Arg::Kind::kList) {
    return false;
  }
  if (a[kBias].kind == Arg::Kind::kTensor) {
    if (ctx.constant_data[a[kBias].tensor.node] == nullptr) return false;
  } else if (a[kBias].kind != Arg::Kind::kNone) {
    return false;
  }
  post_ops->clear();
  for (const Arg& item : a[kPostOps].list) {
    if (item.kind != Arg::Kind::kString) return false;
    absl::StatusOr<PostOp> op = ParsePostOp(item.s);
    if (!op.ok() || op->kind != PostOp::Kind::kEltwise) return false;
    post_ops->push_back(*op);
  }
  *layout = LayoutOf(a[kLayoutIn]);
  return true;
}

}  // namespace

absl::Status FuseConvDepthwise(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.conv2d_dw");
  const Uses uses = ComputeUses(g);
  for (int d = 0; d < static_cast<int>(g.nodes.size()); ++d) {
    std::vector<PostOp> dw_post_ops, post_ops;
    Node& dw = g.nodes[d];
    ActivationLayout layout, pw_layout;
    if (!PlainLayoutConv(ctx, dw, &dw_post_ops, &layout)) continue;
    const TensorMeta& dw_w = g.MetaOf(dw.args[kWeight].tensor);
    const int64_t m = dw_w.shape[0];
    if (dw_w.shape != std::vector<int64_t>{m, 1, 3, 3} || dw.args[kGroups].i != m ||
        !IsIntList(dw.args[kPadding], {1, 1}) ||
        !(IsIntList(dw.args[kStride], {1, 1}) || IsIntList(dw.args[kStride], {2, 2}))) {
      continue;
    }
    const ValueRef mid = dw.args[kInput].tensor;
    if (mid.output != 0 || uses.Count(mid) != 1) continue;
    const Node& pw = g.nodes[mid.node];
    if (!PlainLayoutConv(ctx, pw, &post_ops, &pw_layout) || pw_layout != layout) continue;
    const std::vector<int64_t> in =
        LogicalShape(g.MetaOf(pw.args[kInput].tensor).shape, layout);  // [N, C, H, W]
    const TensorMeta& pw_w = g.MetaOf(pw.args[kWeight].tensor);
    if (in.empty() || pw_w.shape != std::vector<int64_t>{m, in[1], 1, 1} ||
        pw.args[kGroups].i != 1 || !IsIntList(pw.args[kStride], {1, 1}) ||
        !IsIntList(pw.args[kPadding], {0, 0})) {
      continue;
    }
    const DwFusionShape shape{in[0], in[1], in[2], in[3], m, dw.args[kStride].list[0].i, layout};
    if (!DepthwiseFusionPays(shape, post_ops, dw_post_ops, g.options)) continue;
    const Arg stride = IntArg(shape.dw_stride);
    const Arg layout_arg = IntArg(static_cast<int64_t>(layout));
    // The fused node takes the depthwise convolution's place (and output).
    std::vector<Arg> args(conv2d_dw_arg::kLayout.pos + 1);
    args[conv2d_dw_arg::kInput.pos] = pw.args[kInput];
    args[conv2d_dw_arg::kWeight.pos] = pw.args[kWeight];
    args[conv2d_dw_arg::kBias.pos] = pw.args[kBias];
    args[conv2d_dw_arg::kPostOps.pos] = pw.args[kPostOps];
    args[conv2d_dw_arg::kDwWeight.pos] = dw.args[kWeight];
    args[conv2d_dw_arg::kDwBias.pos] = dw.args[kBias];
    args[conv2d_dw_arg::kDwStride.pos] = stride;
    args[conv2d_dw_arg::kDwPostOps.pos] = dw.args[kPostOps];
    args[conv2d_dw_arg::kLayout.pos] = layout_arg;
    dw.args = std::move(args);
    dw.target = "kiln.conv2d_dw";
    dw.op_index = fused_index;
    dw.name = pw.name + "+" + dw.name;
    g.nodes[mid.node].dead = true;
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
