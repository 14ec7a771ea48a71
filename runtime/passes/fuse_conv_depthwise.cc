// Fuses a 1x1 convolution and the 3x3 depthwise convolution that alone
// reads its output into kiln.conv2d_dw (kernels/conv_dw_fusion.h), where
// oneDNN has a real fused kernel for the pair and the fusion pays
// (DepthwiseFusionPays). Runs after layout propagation: only pairs whose
// input and output are both channels-last fuse, so the fused node needs no
// layout arguments of its own.
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/conv_dw_fusion.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// kiln.conv2d argument positions (see kernels/convolution.cc).
enum ConvArg {
  kInput = 0, kWeight, kBias, kStride, kPadding, kDilation, kGroups, kResidual, kPostOps,
  kChannelsLastIn, kChannelsLastOut, kNumConvArgs
};

bool IsIntList(const Arg& a, std::initializer_list<int64_t> want) {
  if (a.kind != Arg::Kind::kList || a.list.size() != want.size()) return false;
  auto it = want.begin();
  for (const Arg& item : a.list) {
    if (item.kind != Arg::Kind::kInt || item.i != *it++) return false;
  }
  return true;
}

bool IsTrue(const Arg& a) { return a.kind == Arg::Kind::kBool && a.b; }

// A channels-last kiln.conv2d with constant weights (and bias, if any), no
// residual and only eltwise post-ops, which it returns.
bool PlainChannelsLastConv(const PassContext& ctx, const Node& n, std::vector<PostOp>* post_ops) {
  if (n.dead || n.target != "kiln.conv2d" || n.args.size() != kNumConvArgs || !n.kwargs.empty()) {
    return false;
  }
  const std::vector<Arg>& a = n.args;
  if (a[kInput].kind != Arg::Kind::kTensor || a[kWeight].kind != Arg::Kind::kTensor ||
      ctx.constant_data[a[kWeight].tensor.node] == nullptr ||
      a[kResidual].kind != Arg::Kind::kNone || !IsTrue(a[kChannelsLastIn]) ||
      !IsTrue(a[kChannelsLastOut]) || !IsIntList(a[kDilation], {1, 1}) ||
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
    if (!PlainChannelsLastConv(ctx, dw, &dw_post_ops)) continue;
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
    if (!PlainChannelsLastConv(ctx, pw, &post_ops)) continue;
    const TensorMeta& in = g.MetaOf(pw.args[kInput].tensor);  // [N, H, W, C]
    const TensorMeta& pw_w = g.MetaOf(pw.args[kWeight].tensor);
    if (in.rank() != 4 || pw_w.shape != std::vector<int64_t>{m, in.shape[3], 1, 1} ||
        pw.args[kGroups].i != 1 || !IsIntList(pw.args[kStride], {1, 1}) ||
        !IsIntList(pw.args[kPadding], {0, 0})) {
      continue;
    }
    const DwFusionShape shape{in.shape[0], in.shape[3], in.shape[1], in.shape[2], m,
                              dw.args[kStride].list[0].i};
    if (!DepthwiseFusionPays(shape, post_ops, dw_post_ops, g.options)) continue;
    const Arg stride = IntArg(shape.dw_stride);
    // The fused node takes the depthwise convolution's place (and output).
    dw.args = {pw.args[kInput], pw.args[kWeight], pw.args[kBias],     pw.args[kPostOps],
               dw.args[kWeight], dw.args[kBias],  stride,             dw.args[kPostOps]};
    dw.target = "kiln.conv2d_dw";
    dw.op_index = fused_index;
    dw.name = pw.name + "+" + dw.name;
    g.nodes[mid.node].dead = true;
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
