// A zero constant_pad_nd of a convolution's input over its two spatial
// dims becomes the convolution's own padding:
//   conv2d(constant_pad_nd(x, [l, r, t, b]), padding=[ph, pw])
//     -> conv2d(x, padding=[t + ph, l + pw, b + ph, r + pw])
// TensorFlow's "same" padding (timm's tf_* models, Keras ports) pads one
// side of a strided convolution more than the other, which ATen's
// convolution cannot express, so the models pad first. The pad was a copy
// of the activation (and, channels-last, a reorder to plain and back, as
// constant_pad_nd runs on plain tensors); oneDNN takes the two sides'
// paddings apart (kernels/convolution.cc: kiln.conv2d's 4 paddings).
//
// Only kiln.conv2d (so after FuseConvPostOps) over a 4-D input, only a
// pad of zeros, non-negative, over the last two dims; the pad node stays
// for its other readers.
#include <vector>

#include "runtime/ir/arg_builders.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// The pad's [left, right, top, bottom] when `node` is a zero
// constant_pad_nd of a 4-D tensor over at most its last two dims.
bool SpatialZeroPad(const Graph& g, const Node& node, std::vector<int64_t>* pad) {
  if (node.dead || node.kind != Node::Kind::kOp ||
      node.target != "aten.constant_pad_nd.default" || node.args.size() < 2 ||
      node.args.size() > 3 || !node.kwargs.empty() || node.args[0].kind != Arg::Kind::kTensor ||
      node.args[1].kind != Arg::Kind::kList || node.outputs.size() != 1 ||
      node.outputs[0].dtype != DType::kF32 || g.MetaOf(node.args[0].tensor).rank() != 4) {
    return false;
  }
  if (node.args.size() == 3) {
    const Arg& v = node.args[2];
    const bool zero = (v.kind == Arg::Kind::kFloat && v.f == 0.0) ||
                      (v.kind == Arg::Kind::kInt && v.i == 0);
    if (!zero) return false;
  }
  const std::vector<Arg>& list = node.args[1].list;
  if (list.size() != 2 && list.size() != 4) return false;
  pad->assign(4, 0);
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].kind != Arg::Kind::kInt || list[i].i < 0) return false;
    (*pad)[i] = list[i].i;
  }
  return true;
}

// The convolution's symmetric [ph, pw], from its padding argument.
bool SymmetricPadding(const Arg& a, int64_t* ph, int64_t* pw) {
  if (a.kind != Arg::Kind::kList || a.list.empty() || a.list.size() > 2) return false;
  for (const Arg& v : a.list) {
    if (v.kind != Arg::Kind::kInt || v.i < 0) return false;
  }
  *ph = a.list[0].i;
  *pw = a.list.size() == 2 ? a.list[1].i : a.list[0].i;
  return true;
}

}  // namespace

absl::Status FoldConvPadding(PassContext& ctx) {
  Graph& g = ctx.graph;
  bool changed = false;
  for (Node& conv : g.nodes) {
    if (conv.dead || conv.kind != Node::Kind::kOp || conv.target != "kiln.conv2d" ||
        conv.args.size() <= conv2d_arg::kPadding.pos) {
      continue;
    }
    Arg& input = conv.args[conv2d_arg::kInput.pos];
    if (input.kind != Arg::Kind::kTensor || input.tensor.output != 0) continue;
    std::vector<int64_t> pad;
    int64_t ph = 0, pw = 0;
    if (!SpatialZeroPad(g, g.nodes[input.tensor.node], &pad) ||
        !SymmetricPadding(conv.args[conv2d_arg::kPadding.pos], &ph, &pw)) {
      continue;
    }
    const ValueRef source = g.nodes[input.tensor.node].args[0].tensor;
    input = TensorArg(source);
    conv.args[conv2d_arg::kPadding.pos] =
        ListArg({IntArg(pad[2] + ph), IntArg(pad[0] + pw), IntArg(pad[3] + ph),
                 IntArg(pad[1] + pw)});
    changed = true;
  }
  if (changed) EliminateDeadNodes(g);
  return absl::OkStatus();
}

}  // namespace kiln::runtime
