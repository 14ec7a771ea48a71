// Squeeze-and-excitation blocks (regnet, efficientnet, mobilenet_v3), as
// the convolution passes and the layout pass leave them:
//
//   s = mean(x, H and W, keepdim) -> kiln.conv2d 1x1 (activation)
//     -> kiln.conv2d 1x1 (gate activation) -> mul(gate, x)
//
// become one kiln.squeeze_excite node (kernels/squeeze_excite.cc) in the
// mul's place. The two convolutions run on a 1x1 image: a few thousand
// multiply-adds that cost a primitive call each, so four steps of tens of
// microseconds become one. Each intermediate must be read by the next step
// alone; the activations must be ones the post-op loops implement. Runs
// after output metas were inferred again following the layout pass, so
// shapes are the layout's. KILN_SQUEEZE_EXCITE=0 leaves the blocks as they
// are (for comparisons; read per compile).
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/post_op_loops.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// The live node reading output 0 of node `v`, when it is the only reader
// and the value is not a graph output; -1 otherwise.
int SoleUser(const Graph& g, const Uses& uses, int v) {
  if (g.nodes[v].outputs.size() != 1 || uses.is_output[v][0] || uses.users[v][0].size() != 1) {
    return -1;
  }
  return uses.users[v][0][0];
}

// Post-ops the squeeze-excite kernel's loops apply: activations only.
bool LoopActivations(const Arg& a) {
  if (a.kind != Arg::Kind::kList) return false;
  std::vector<PostOp> ops;
  for (const Arg& item : a.list) {
    if (item.kind != Arg::Kind::kString) return false;
    absl::StatusOr<PostOp> op = ParsePostOp(item.s);
    if (!op.ok()) return false;
    ops.push_back(*op);
  }
  return LoopsImplement(ops);
}

// A convolution's layout_in or layout_out (`pos`): plain when the layout
// pass left the arguments out; -1 when not an int.
int64_t LayoutOf(const Node& conv, size_t pos) {
  if (conv.args.size() <= pos) return static_cast<int64_t>(ActivationLayout::kPlain);
  return conv.args[pos].kind == Arg::Kind::kInt ? conv.args[pos].i : -1;
}

// A 1x1 convolution of `input` with no padding, stride or groups, no
// residual and loop-implemented activations.
bool IsPointwiseOnPixel(const Node& n, int input) {
  if (n.dead || n.target != "kiln.conv2d" ||
      (n.args.size() != conv2d_arg::kLayoutOut.pos + 1 &&
       n.args.size() != conv2d_arg::kLayoutIn.pos) ||
      !n.kwargs.empty() || n.args[conv2d_arg::kInput.pos].kind != Arg::Kind::kTensor ||
      !(n.args[conv2d_arg::kInput.pos].tensor == ValueRef{input, 0}) ||
      n.args[conv2d_arg::kWeight.pos].kind != Arg::Kind::kTensor ||
      (n.args[conv2d_arg::kBias.pos].kind != Arg::Kind::kTensor &&
       n.args[conv2d_arg::kBias.pos].kind != Arg::Kind::kNone) ||
      n.args[conv2d_arg::kResidual.pos].kind != Arg::Kind::kNone) {
    return false;
  }
  const Arg& groups = n.args[conv2d_arg::kGroups.pos];
  return IsIntList(n.args[conv2d_arg::kStride.pos], {1, 1}) &&
         IsIntList(n.args[conv2d_arg::kPadding.pos], {0, 0}) &&
         IsIntList(n.args[conv2d_arg::kDilation.pos], {1, 1}) && groups.kind == Arg::Kind::kInt &&
         groups.i == 1 && LoopActivations(n.args[conv2d_arg::kPostOps.pos]);
}

struct Block {
  ValueRef x;
  ActivationLayout layout;
  int conv1, conv2, mul;
};

// The block whose mean is node `m`.
std::optional<Block> MatchBlock(const Graph& g, const Uses& uses, int m) {
  const Node& mean = g.nodes[m];
  if (mean.dead || mean.target != "aten.mean.dim" || !mean.kwargs.empty() ||
      mean.args.size() != 3 || mean.args[0].kind != Arg::Kind::kTensor ||
      mean.args[2].kind != Arg::Kind::kBool || !mean.args[2].b) {
    return std::nullopt;
  }
  Block b{mean.args[0].tensor, ActivationLayout::kPlain, SoleUser(g, uses, m), -1, -1};
  if (b.conv1 < 0 || !IsPointwiseOnPixel(g.nodes[b.conv1], m)) return std::nullopt;
  const Node& conv1 = g.nodes[b.conv1];
  const int64_t layout = LayoutOf(conv1, conv2d_arg::kLayoutIn.pos);
  if (layout < 0 || layout > 2) return std::nullopt;
  b.layout = static_cast<ActivationLayout>(layout);
  const TensorMeta& x = g.MetaOf(b.x);
  const std::vector<int64_t> nchw = LogicalShape(x.shape, b.layout);
  if (x.dtype != DType::kF32 || nchw.empty() || nchw[2] * nchw[3] == 0) return std::nullopt;
  // The mean must be over exactly H and W of that layout.
  std::set<int64_t> dims;
  if (mean.args[1].kind != Arg::Kind::kList) return std::nullopt;
  for (const Arg& d : mean.args[1].list) {
    if (d.kind != Arg::Kind::kInt) return std::nullopt;
    dims.insert(d.i < 0 ? d.i + x.rank() : d.i);
  }
  const std::set<int64_t> spatial =
      b.layout == ActivationLayout::kNhwc ? std::set<int64_t>{1, 2} : std::set<int64_t>{2, 3};
  if (dims != spatial) return std::nullopt;
  const std::vector<int64_t> pixel = {nchw[0], nchw[1], 1, 1};
  if (mean.outputs[0].shape != LayoutShape(pixel, b.layout)) return std::nullopt;

  b.conv2 = SoleUser(g, uses, b.conv1);
  if (b.conv2 < 0 || !IsPointwiseOnPixel(g.nodes[b.conv2], b.conv1)) return std::nullopt;
  const Node& conv2 = g.nodes[b.conv2];
  if (LayoutOf(conv2, conv2d_arg::kLayoutOut.pos) != layout ||
      conv2.outputs[0].shape != LayoutShape(pixel, b.layout)) {
    return std::nullopt;
  }
  const TensorMeta& w1 = g.MetaOf(conv1.args[conv2d_arg::kWeight.pos].tensor);
  const TensorMeta& w2 = g.MetaOf(conv2.args[conv2d_arg::kWeight.pos].tensor);
  if (w1.rank() != 4 || w1.shape[1] != nchw[1] ||
      w2.shape != std::vector<int64_t>{nchw[1], w1.shape[0], 1, 1}) {
    return std::nullopt;
  }

  b.mul = SoleUser(g, uses, b.conv2);
  if (b.mul < 0) return std::nullopt;
  const Node& mul = g.nodes[b.mul];
  if (mul.dead || mul.target != "aten.mul.Tensor" || mul.args.size() != 2 ||
      !mul.kwargs.empty() || mul.outputs.size() != 1 || mul.outputs[0] != x) {
    return std::nullopt;
  }
  const ValueRef gate{b.conv2, 0};
  for (int k = 0; k < 2; ++k) {
    const Arg& a = mul.args[k];
    const Arg& other = mul.args[1 - k];
    if (a.kind == Arg::Kind::kTensor && other.kind == Arg::Kind::kTensor && a.tensor == gate &&
        other.tensor == b.x) {
      return b;
    }
  }
  return std::nullopt;
}

}  // namespace

absl::Status FuseSqueezeExcite(PassContext& ctx) {
  if (!KernelSwitchOn("KILN_SQUEEZE_EXCITE")) return absl::OkStatus();
  Graph& g = ctx.graph;
  const int fused_index = FindOp("kiln.squeeze_excite");
  Uses uses = ComputeUses(g);
  for (int m = 0; m < static_cast<int>(g.nodes.size()); ++m) {
    std::optional<Block> b = MatchBlock(g, uses, m);
    if (!b) continue;
    const Node& conv1 = g.nodes[b->conv1];
    const Node& conv2 = g.nodes[b->conv2];
    std::vector<Arg> args(squeeze_excite_arg::kLayout.pos + 1);
    args[squeeze_excite_arg::kX.pos] = TensorArg(b->x);
    args[squeeze_excite_arg::kW1.pos] = conv1.args[conv2d_arg::kWeight.pos];
    args[squeeze_excite_arg::kB1.pos] = conv1.args[conv2d_arg::kBias.pos];
    args[squeeze_excite_arg::kW2.pos] = conv2.args[conv2d_arg::kWeight.pos];
    args[squeeze_excite_arg::kB2.pos] = conv2.args[conv2d_arg::kBias.pos];
    args[squeeze_excite_arg::kPostOps1.pos] = conv1.args[conv2d_arg::kPostOps.pos];
    args[squeeze_excite_arg::kPostOps2.pos] = conv2.args[conv2d_arg::kPostOps.pos];
    args[squeeze_excite_arg::kLayout.pos] = IntArg(static_cast<int64_t>(b->layout));
    Node& fused = g.nodes[b->mul];
    fused.name = absl::StrCat(g.nodes[m].name, "+", conv1.name, "+", conv2.name, "+", fused.name);
    fused.target = "kiln.squeeze_excite";
    fused.op_index = fused_index;
    fused.args = std::move(args);
    g.nodes[m].dead = true;
    g.nodes[b->conv1].dead = true;
    g.nodes[b->conv2].dead = true;
    uses = ComputeUses(g);
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
