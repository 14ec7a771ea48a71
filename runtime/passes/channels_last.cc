// Layout propagation: keeps the activations between convolutions in the
// layout the convolutions' oneDNN kernels compute in, so they read and
// write them without a reorder per call, and converts back to the graph's
// plain NCHW only where an op that needs it, or a graph output, reads the
// value. The layout (kernels/activation_layout.h) is one per graph:
//
//  - channels-last (NHWC), the dense permuted [N, H, W, C]: oneDNN's
//    AVX-512 kernels (brgconv) compute in it;
//  - blocked (nChw8c), the dense [N, C/8, H, W, 8], for values with
//    C % 8 == 0: oneDNN's AVX2 kernels for 1x1 and depthwise convolutions
//    (jit_1x1, jit_dw) run faster in it than in NHWC
//    (bench/kernels/conv_layout_bench.cc). ChooseLayout picks it on CPUs
//    without AVX-512 for graphs where those convolutions dominate.
//
// Either way a converted value is an ordinary dense tensor: kernels never
// see a layout flag. Only kiln.conv2d knows about layouts (its layout_in /
// layout_out arguments); elementwise ops, cat and mean run unchanged on the
// converted shapes (their dimension arguments remapped; per-channel or
// per-pixel broadcast operands become views that broadcast the same way),
// pooling runs its NHWC kernel on the blocked tensor seen as N * C/8 images
// of 8 channels. In channels-last, split_with_sizes splits along the
// dimension's new position (and slice slices so), constant_pad_nd pads
// the same sides of the dims' new positions, group norm runs its NHWC
// kernel (statistics over a run of channels in every pixel), an alias
// aliases the converted value, and shufflenet's channel shuffle
// (ShuffleChain) becomes the same permutation of channels within each
// pixel. Conversions are explicit aten.permute nodes (or free aten.view
// aliases when the bytes agree), so the optimized graph's dump shows every
// reorder that remains. Ops with no form in the layout (e.g.
// unfolded batch norm in the blocked layout) read a converted plain value.
//
// The pass rebuilds the node list (inserting conversions in front of their
// users keeps it topologically ordered) and leaves every op node's output
// metas to be inferred again by the compiler.
#include <algorithm>
#include <array>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/layout_cost.h"
#include "runtime/passes/layout_rules.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

using namespace channels_last;  // NOLINT: the pass's own parts

class Rewriter {
 public:
  Rewriter(PassContext& ctx, Layout layout)
      : ctx_(ctx),
        old_(ctx.graph),
        layout_(layout),
        view_index_(FindOp("aten.view.default")),
        permute_index_(FindOp("aten.permute.default")),
        uses_(ComputeUses(old_)),
        shuffles_(layout == Layout::kNhwc ? FindShuffles(old_, uses_)
                                          : absl::flat_hash_map<int, ShuffleChain>()),
        wants_cl_(WantsLayout(old_, layout, shuffles_)) {
    plain_.resize(old_.nodes.size());
    cl_.resize(old_.nodes.size());
    // A shuffle's steps are emitted together at its last node (read by
    // nothing but the next step, they can wait).
    in_shuffle_.assign(old_.nodes.size(), false);
    for (const auto& [last, chain] : shuffles_) {
      for (int step : chain.steps) in_shuffle_[step] = step != last;
    }
    for (size_t i = 0; i < old_.nodes.size(); ++i) {
      plain_[i].assign(old_.nodes[i].outputs.size(), std::nullopt);
      cl_[i].assign(old_.nodes[i].outputs.size(), std::nullopt);
    }
  }

  absl::Status Run() {
    // Inputs and constants first: passes append the constants they create
    // after the ops that use them.
    for (int i = 0; i < static_cast<int>(old_.nodes.size()); ++i) {
      const Node& node = old_.nodes[i];
      if (!node.dead && node.kind != Node::Kind::kOp) {
        plain_[i][0] = Emit(node, ctx_.constant_data[i]);
      }
    }
    for (int i = 0; i < static_cast<int>(old_.nodes.size()); ++i) {
      const Node& node = old_.nodes[i];
      if (node.dead || node.kind != Node::Kind::kOp || in_shuffle_[i]) continue;
      if (auto chain = shuffles_.find(i); chain != shuffles_.end()) {
        if (!Shuffle(chain->second)) {
          for (int step : chain->second.steps) CopyPlain(step);
        }
        continue;
      }
      if (!Rewrite(i)) CopyPlain(i);
    }
    std::vector<ValueRef> outputs;
    for (const ValueRef& out : old_.outputs) outputs.push_back(PlainOf(out));
    ctx_.graph.nodes = std::move(nodes_);
    ctx_.graph.outputs = std::move(outputs);
    ctx_.constant_data = std::move(constant_data_);
    return absl::OkStatus();
  }

 private:
  const TensorMeta& Meta(ValueRef old) const { return old_.MetaOf(old); }

  ValueRef Emit(Node node, const void* constant = nullptr) {
    nodes_.push_back(std::move(node));
    constant_data_.push_back(constant);
    return {static_cast<int>(nodes_.size()) - 1, 0};
  }

  ValueRef EmitOp(const std::string& target, int op_index, std::string name,
                  std::vector<Arg> args, TensorMeta meta) {
    Node n;
    n.kind = Node::Kind::kOp;
    n.target = target;
    n.op_index = op_index;
    n.name = std::move(name);
    n.args = std::move(args);
    n.outputs = {std::move(meta)};
    return Emit(std::move(n));
  }

  ValueRef View(ValueRef v, const std::vector<int64_t>& shape, const std::string& name) {
    TensorMeta meta = nodes_[v.node].outputs[v.output];
    meta.shape = shape;
    return EmitOp("aten.view.default", view_index_, name, {TensorArg(v), IntListArg(shape)},
                  meta);
  }

  ValueRef Permute(ValueRef v, const std::vector<int64_t>& dims, const std::string& name) {
    TensorMeta meta = nodes_[v.node].outputs[v.output];
    std::vector<int64_t> shape;
    for (int64_t d : dims) shape.push_back(meta.shape[d]);
    meta.shape = shape;
    return EmitOp("aten.permute.default", permute_index_, name, {TensorArg(v), IntListArg(dims)},
                  meta);
  }

  std::string NameOf(ValueRef old) const { return old_.nodes[old.node].name; }

  bool blocked() const { return layout_ == Layout::kBlocked; }
  const char* LayoutSuffix() const { return blocked() ? "nchw8c" : "nhwc"; }

  // The dense shape of logical NCHW `logical` in the graph's layout.
  std::vector<int64_t> PhysicalShape(const std::vector<int64_t>& logical) const {
    return LayoutShape(logical, layout_);
  }

  // A rank-4 f32 value that can be held in the graph's layout.
  // f32 activations, and the integers a quantized graph keeps them in
  // between its quantize and dequantize ops.
  static bool LayoutDType(DType d) {
    return d == DType::kF32 || d == DType::kU8 || d == DType::kI8 || d == DType::kI16 ||
           d == DType::kI32;
  }

  bool Representable(const TensorMeta& meta) const {
    return LayoutDType(meta.dtype) && HasLayoutForm(meta.shape, layout_);
  }

  // The value in plain NCHW order, converting (once) if it only exists in
  // the graph's layout. Blocked to plain: [N, C/8, H, W, 8] is permuted to
  // [N, C/8, 8, H, W], whose bytes are [N, C, H, W].
  ValueRef PlainOf(ValueRef old) {
    auto& plain = plain_[old.node][old.output];
    if (plain) return *plain;
    const ValueRef cl = *cl_[old.node][old.output];
    const TensorMeta& meta = Meta(old);
    const std::string name = NameOf(old);
    if (LayoutAmbiguous(meta.shape, layout_)) {
      plain = View(cl, meta.shape, absl::StrCat(name, ".nchw_view"));
    } else if (blocked()) {
      plain = View(Permute(cl, {0, 1, 4, 2, 3}, absl::StrCat(name, ".to_nchw")), meta.shape,
                   absl::StrCat(name, ".nchw_view"));
    } else {
      plain = Permute(cl, {0, 3, 1, 2}, absl::StrCat(name, ".to_nchw"));
    }
    return *plain;
  }

  // Converts plain value `plain` (logical shape `shape`) into the graph's
  // layout with an explicit reorder. Plain to blocked: [N, C, H, W] is
  // viewed as [N, C/8, 8, H, W] and permuted to [N, C/8, H, W, 8].
  ValueRef ToLayout(ValueRef plain, const std::vector<int64_t>& shape, const std::string& name) {
    if (!blocked()) return Permute(plain, {0, 2, 3, 1}, absl::StrCat(name, ".to_nhwc"));
    const ValueRef split = View(plain, {shape[0], shape[1] / kChannelBlock, kChannelBlock,
                                        shape[2], shape[3]},
                                absl::StrCat(name, ".split_view"));
    return Permute(split, {0, 1, 3, 4, 2}, absl::StrCat(name, ".to_nchw8c"));
  }

  // The value in the graph's layout if it has one (or can have one for
  // free); never copies.
  std::optional<ValueRef> ChannelsLastOf(ValueRef old) {
    auto& cl = cl_[old.node][old.output];
    if (cl) return cl;
    const TensorMeta& meta = Meta(old);
    if (meta.rank() == 4 && meta.dtype == DType::kF32 && LayoutAmbiguous(meta.shape, layout_)) {
      cl = View(*plain_[old.node][old.output], PhysicalShape(meta.shape),
                absl::StrCat(NameOf(old), ".", LayoutSuffix(), "_view"));
    }
    return cl;
  }

  // A broadcast operand of an elementwise op running in the graph's
  // layout: values in it as they are, scalars as they are, others that
  // broadcast the same way (BroadcastShape) as views.
  std::optional<ValueRef> BroadcastOperand(ValueRef old) {
    const TensorMeta& meta = Meta(old);
    if (meta.rank() == 4) {
      if (std::optional<ValueRef> cl = ChannelsLastOf(old)) return cl;
    }
    if (meta.NumElements() == 1 && meta.rank() <= 1) return PlainOf(old);
    const std::optional<std::vector<int64_t>> shape = BroadcastShape(meta, layout_);
    if (!shape) return std::nullopt;
    return View(PlainOf(old), *shape, absl::StrCat(NameOf(old), ".", LayoutSuffix(), "_view"));
  }

  // Copies node i with every tensor argument in plain order.
  void CopyPlain(int i) {
    Node n = old_.nodes[i];
    for (Arg& a : n.args) MapArg(a, [&](ValueRef r) { return PlainOf(r); });
    for (NamedArg& a : n.kwargs) MapArg(a.value, [&](ValueRef r) { return PlainOf(r); });
    const int outputs = static_cast<int>(n.outputs.size());
    const ValueRef first = Emit(std::move(n));
    for (int o = 0; o < outputs; ++o) plain_[i][o] = ValueRef{first.node, o};
  }

  template <typename F>
  static void MapArg(Arg& a, F&& f) {
    if (a.kind == Arg::Kind::kTensor) {
      a.tensor = f(a.tensor);
    } else if (a.kind == Arg::Kind::kList) {
      for (Arg& item : a.list) MapArg(item, f);
    }
  }

  // A channel shuffle of a channels-last value, kept channels-last (see
  // ShuffleChain). False: the caller copies its steps plain.
  bool Shuffle(const ShuffleChain& chain) {
    const std::optional<ValueRef> x = cl_[chain.x.node][chain.x.output];
    if (!x) return false;
    const std::vector<int64_t> s = nodes_[x->node].outputs[x->output].shape;  // [N, H, W, C]
    const int last = chain.steps.back();
    const std::string& name = old_.nodes[last].name;
    const ValueRef split = View(*x, {s[0], s[1], s[2], chain.groups, s[3] / chain.groups},
                                absl::StrCat(name, ".groups_view"));
    const ValueRef swapped = Permute(split, {0, 1, 2, 4, 3}, absl::StrCat(name, ".shuffle"));
    cl_[last][0] = View(swapped, s, absl::StrCat(name, ".nhwc_view"));
    return true;
  }

  // split_with_sizes or slice of a channels-last value along any
  // dimension: the same along that dimension's channels-last position
  // (GhostNet keeps the first channels of a cat so).
  bool RewriteSplit(int i) {
    Node n = old_.nodes[i];
    const ValueRef in = n.args[0].tensor;
    if (blocked() || !cl_[in.node][in.output] || !n.kwargs.empty()) return false;
    if (!RemapDim(n, SplitDimPos(n), "dim", layout_)) return false;
    n.args[0].tensor = *cl_[in.node][in.output];
    for (TensorMeta& out : n.outputs) out.shape = PhysicalShape(out.shape);
    const int outputs = static_cast<int>(n.outputs.size());
    const ValueRef first = Emit(std::move(n));
    for (int o = 0; o < outputs; ++o) cl_[i][o] = ValueRef{first.node, o};
    return true;
  }

  // Emits node i in channels-last form when it has one; false to copy it
  // in plain form instead.
  bool Rewrite(int i) {
    const Node& node = old_.nodes[i];
    if (IsSplit(old_, node)) return RewriteSplit(i);
    const OpDef* op = OpOf(node);
    const char* form = op != nullptr ? op->traits.layout_form : nullptr;
    if (form != nullptr && node.outputs.size() > 1 && RunsInLayout(node, layout_)) {
      return RewriteFirstOutputOnly(i, form);
    }
    if (node.outputs.size() != 1) return false;
    const TensorMeta& out = node.outputs[0];
    if (node.target == "kiln.conv2d") return RewriteConv(i);
    if (out.dtype != DType::kF32 && !(HasTrait(node, kElementwise) && LayoutDType(out.dtype))) {
      return false;
    }
    if (node.target == "aten.permute.default") return !blocked() && RewritePermute(i);
    std::vector<ValueRef> inputs = TensorInputsOf(node);
    bool any_cl = false;
    for (const ValueRef& r : inputs) any_cl |= cl_[r.node][r.output].has_value();
    if (!any_cl) return false;
    if (HasTrait(node, kElementwise) && Representable(out)) return RewriteElementwise(i);
    if (node.target == "aten.cat.default") return RewriteCat(i);
    if (node.target == "aten.constant_pad_nd.default") return RewritePad(i);
    if (node.target == "aten.alias.default") return RewriteAlias(i);
    if (node.target == "aten.mean.dim") return RewriteMean(i);
    if (form != nullptr && RunsInLayout(node, layout_)) return RewriteSameArgs(i, form);
    return false;
  }

  // An alias of a value in the graph's layout: the same alias of it.
  bool RewriteAlias(int i) {
    Node n = old_.nodes[i];
    if (n.args.size() != 1 || n.args[0].kind != Arg::Kind::kTensor || !n.kwargs.empty()) {
      return false;
    }
    const ValueRef in = n.args[0].tensor;
    if (!cl_[in.node][in.output]) return false;
    n.args[0].tensor = *cl_[in.node][in.output];
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  // constant_pad_nd of a channels-last value: the same pads, listed for
  // the dims' channels-last positions (NHWC only). A pool's -inf padding
  // (TensorFlow's "same" padding: pnasnet, timm's tf_* models) then stays
  // channels-last with the pool after it, where in plain form it took a
  // reorder each way and the pool's plain kernel.
  bool RewritePad(int i) {
    Node n = old_.nodes[i];
    if (blocked() || n.args.size() < 2 || n.args[0].kind != Arg::Kind::kTensor ||
        n.args[1].kind != Arg::Kind::kList || !n.kwargs.empty()) {
      return false;
    }
    const ValueRef in = n.args[0].tensor;
    if (Meta(in).rank() != 4 || !cl_[in.node][in.output] || !Representable(n.outputs[0])) {
      return false;
    }
    const std::vector<Arg>& list = n.args[1].list;
    if (list.size() % 2 != 0 || list.size() > 8) return false;
    // (before, after) of each NCHW dim; the list runs from the last dim.
    std::array<std::array<int64_t, 2>, 4> pads{};
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k].kind != Arg::Kind::kInt) return false;
      pads[3 - k / 2][k % 2] = list[k].i;
    }
    // Listed again from the last physical dim.
    std::array<std::array<int64_t, 2>, 4> physical{};
    for (int d = 0; d < 4; ++d) physical[kToPhysical[d]] = pads[d];
    std::vector<Arg> remapped;
    for (int q = 3; q >= 0; --q) {
      remapped.push_back(IntArg(physical[q][0]));
      remapped.push_back(IntArg(physical[q][1]));
    }
    while (remapped.size() > 2 && remapped[remapped.size() - 1].i == 0 &&
           remapped[remapped.size() - 2].i == 0) {
      remapped.resize(remapped.size() - 2);
    }
    n.args[0].tensor = *cl_[in.node][in.output];
    n.args[1] = ListArg(std::move(remapped));
    for (size_t a = 2; a < n.args.size(); ++a) {
      MapArg(n.args[a], [&](ValueRef r) { return PlainOf(r); });
    }
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  // Ops whose channels-last form takes the same arguments, the first being
  // the (channels-last) input.
  bool RewriteSameArgs(int i, const std::string& target) {
    Node n = old_.nodes[i];
    if (n.args.empty() || n.args[0].kind != Arg::Kind::kTensor) return false;
    const ValueRef in = n.args[0].tensor;
    if (Meta(in).rank() != 4 || !cl_[in.node][in.output] || n.outputs[0].rank() != 4) {
      return false;
    }
    n.args[0].tensor = *cl_[in.node][in.output];
    for (size_t a = 1; a < n.args.size(); ++a) {
      MapArg(n.args[a], [&](ValueRef r) { return PlainOf(r); });
    }
    for (NamedArg& a : n.kwargs) MapArg(a.value, [&](ValueRef r) { return PlainOf(r); });
    n.target = target;
    n.op_index = FindOp(target);
    n.outputs.resize(1);
    const std::vector<int64_t> out = n.outputs[0].shape;
    if (!blocked()) {
      n.outputs[0].shape = PhysicalShape(out);
      cl_[i][0] = Emit(std::move(n));
      return true;
    }
    // Blocked: the NHWC kernel pools [N * C/8, H, W, 8], 8 channels per
    // image; views on both sides keep the bytes in place.
    if (!Representable(n.outputs[0])) return false;
    const ValueRef in_ref = n.args[0].tensor;
    const std::vector<int64_t> in_shape = nodes_[in_ref.node].outputs[in_ref.output].shape;
    n.args[0].tensor = View(n.args[0].tensor,
                            {in_shape[0] * in_shape[1], in_shape[2], in_shape[3], kChannelBlock},
                            absl::StrCat(n.name, ".images_view"));
    const std::vector<int64_t> physical = PhysicalShape(out);
    n.outputs[0].shape = {physical[0] * physical[1], physical[2], physical[3], kChannelBlock};
    const std::string name = n.name;
    cl_[i][0] = View(Emit(std::move(n)), physical, absl::StrCat(name, ".nchw8c_view"));
    return true;
  }

  // Ops with extra outputs that inference graphs rarely read (max pooling's
  // indices, batch norm's saved statistics): when none is read, their
  // layout forms compute only the first.
  bool RewriteFirstOutputOnly(int i, const std::string& form) {
    const Node& node = old_.nodes[i];
    for (size_t o = 1; o < node.outputs.size(); ++o) {
      if (!uses_.users[i][o].empty() || uses_.is_output[i][o]) return false;
    }
    if (!node.kwargs.empty() || node.args.empty()) return false;
    if (form != "kiln.batch_norm_nhwc") return RewriteSameArgs(i, form);
    // Batch norm: (input, weight, bias, mean, var, eps) from either overload.
    const bool native = node.target == "aten.native_batch_norm.default";
    const size_t eps_pos = native ? 7 : 6;
    if (node.args.size() <= eps_pos || node.args[eps_pos].kind != Arg::Kind::kFloat) return false;
    if (native && (node.args[5].kind != Arg::Kind::kBool || node.args[5].b)) return false;
    Node n = node;
    n.args.assign(batch_norm_nhwc_arg::kEps.pos + 1, NoneArg());
    n.args[batch_norm_nhwc_arg::kInput.pos] = node.args[0];
    n.args[batch_norm_nhwc_arg::kWeight.pos] = node.args[1];
    n.args[batch_norm_nhwc_arg::kBias.pos] = node.args[2];
    n.args[batch_norm_nhwc_arg::kRunningMean.pos] = node.args[3];
    n.args[batch_norm_nhwc_arg::kRunningVar.pos] = node.args[4];
    n.args[batch_norm_nhwc_arg::kEps.pos] = node.args[eps_pos];
    n.target = form;
    n.op_index = FindOp(n.target);
    Arg& input = n.args[batch_norm_nhwc_arg::kInput.pos];
    const ValueRef in = input.kind == Arg::Kind::kTensor ? input.tensor : ValueRef{};
    if (in.node < 0 || Meta(in).rank() != 4 || !cl_[in.node][in.output]) return false;
    input.tensor = *cl_[in.node][in.output];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (a == batch_norm_nhwc_arg::kInput.pos) continue;
      MapArg(n.args[a], [&](ValueRef r) { return PlainOf(r); });
    }
    n.outputs.resize(1);
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  bool RewriteConv(int i) {
    Node n = old_.nodes[i];
    if (n.args.size() <= conv2d_arg::kPostOps.pos || !n.kwargs.empty() ||
        n.outputs[0].rank() != 4) {
      return false;
    }
    // Input: in the graph's layout when it already is; the kernel reorders
    // a plain one itself.
    Arg& input = n.args[conv2d_arg::kInput.pos];
    const ValueRef in = input.tensor;
    std::optional<ValueRef> in_cl = cl_[in.node][in.output];
    input.tensor = in_cl ? *in_cl : PlainOf(in);
    Arg& weight = n.args[conv2d_arg::kWeight.pos];
    weight.tensor = PlainOf(weight.tensor);
    Arg& bias = n.args[conv2d_arg::kBias.pos];
    if (bias.kind == Arg::Kind::kTensor) bias.tensor = PlainOf(bias.tensor);
    const bool out_cl = wants_cl_[i][0] && Representable(n.outputs[0]);
    Arg& residual = n.args[conv2d_arg::kResidual.pos];
    if (residual.kind == Arg::Kind::kTensor && out_cl) {
      // The residual is added in the output's layout.
      const ValueRef res = residual.tensor;
      std::optional<ValueRef> res_cl = ChannelsLastOf(res);
      residual.tensor = res_cl ? *res_cl : ToLayout(PlainOf(res), Meta(res).shape, NameOf(res));
    }
    if (residual.kind == Arg::Kind::kTensor && !out_cl) residual.tensor = PlainOf(residual.tensor);
    // The channel affine's operands are [C] constants, in no layout.
    for (ArgSlot slot : {conv2d_arg::kChannelScale, conv2d_arg::kChannelShift}) {
      if (n.args.size() > slot.pos && n.args[slot.pos].kind == Arg::Kind::kTensor) {
        n.args[slot.pos].tensor = PlainOf(n.args[slot.pos].tensor);
      }
    }
    if (n.args.size() <= conv2d_arg::kLayoutOut.pos) n.args.resize(conv2d_arg::kLayoutOut.pos + 1);
    n.args[conv2d_arg::kLayoutIn.pos] =
        IntArg(static_cast<int64_t>(in_cl ? layout_ : Layout::kPlain));
    n.args[conv2d_arg::kLayoutOut.pos] =
        IntArg(static_cast<int64_t>(out_cl ? layout_ : Layout::kPlain));
    if (out_cl) {
      n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
      cl_[i][0] = Emit(std::move(n));
    } else {
      plain_[i][0] = Emit(std::move(n));
    }
    return true;
  }

  // permute(x, [0, 2, 3, 1]) of a channels-last x is x's bytes (a view);
  // permute(y, [0, 3, 1, 2]) has y's bytes as its channels-last form.
  bool RewritePermute(int i) {
    const Node& node = old_.nodes[i];
    if (node.args.size() != 2 || node.args[0].kind != Arg::Kind::kTensor ||
        node.args[1].kind != Arg::Kind::kList || node.args[1].list.size() != 4) {
      return false;
    }
    std::vector<int64_t> dims;
    for (const Arg& a : node.args[1].list) {
      if (a.kind != Arg::Kind::kInt) return false;
      dims.push_back(WrapDim(a.i, 4));
    }
    const ValueRef in = node.args[0].tensor;
    if (Meta(in).rank() != 4) return false;
    if (dims == std::vector<int64_t>{0, 2, 3, 1} && cl_[in.node][in.output]) {
      plain_[i][0] = View(*cl_[in.node][in.output], node.outputs[0].shape, node.name);
      return true;
    }
    if (dims == std::vector<int64_t>{0, 3, 1, 2}) {
      cl_[i][0] = PlainOf(in);
      return true;
    }
    return false;
  }

  bool RewriteElementwise(int i) {
    Node n = old_.nodes[i];
    // Full-size plain operands would need a copy: then the op stays plain.
    for (const ValueRef& r : TensorInputsOf(n)) {
      const TensorMeta& m = Meta(r);
      if (m.rank() == 4 && cl_[r.node][r.output]) continue;
      if (m.NumElements() == 1 && m.rank() <= 1) continue;
      if (!BroadcastShape(m, layout_)) return false;
    }
    // Every operand passed the check, so each has a channels-last form.
    auto map = [&](ValueRef r) { return *BroadcastOperand(r); };
    for (Arg& a : n.args) MapArg(a, map);
    for (NamedArg& a : n.kwargs) MapArg(a.value, map);
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  bool RewriteCat(int i) {
    Node n = old_.nodes[i];
    Arg* tensors = FindArg(n, 0, "tensors");
    if (tensors == nullptr || tensors->kind != Arg::Kind::kList) return false;
    for (const Arg& a : tensors->list) {
      if (a.kind != Arg::Kind::kTensor || Meta(a.tensor).rank() != 4 ||
          !Representable(Meta(a.tensor)) || !ChannelsLastOf(a.tensor)) {
        return false;
      }
    }
    if (!RemapDim(n, 1, "dim", layout_)) return false;
    for (Arg& a : tensors->list) a.tensor = *cl_[a.tensor.node][a.tensor.output];
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  // mean over spatial dims (global pooling, squeeze-excitation).
  bool RewriteMean(int i) {
    Node n = old_.nodes[i];
    if (n.args.empty() || n.args[0].kind != Arg::Kind::kTensor) return false;
    const ValueRef in = n.args[0].tensor;
    if (Meta(in).rank() != 4 || !cl_[in.node][in.output]) return false;
    Arg* dims = FindArg(n, 1, "dim");
    if (dims == nullptr || dims->kind != Arg::Kind::kList || dims->list.empty()) return false;
    Arg* keep = FindArg(n, 2, "keepdim");
    const bool keepdim = keep != nullptr && keep->kind == Arg::Kind::kBool && keep->b;
    std::array<bool, 4> reduced = {false, false, false, false};
    for (const Arg& a : dims->list) {
      if (a.kind != Arg::Kind::kInt || a.i < -4 || a.i > 3) return false;
      reduced[WrapDim(a.i, 4)] = true;
    }
    if (blocked()) return RewriteBlockedMean(i, reduced, keepdim);
    if (!keepdim) {
      // The kept dims must come out in the same order either way.
      std::vector<int> logical, physical;
      for (int d = 0; d < 4; ++d) {
        if (!reduced[d]) logical.push_back(d);
        if (!reduced[kToLogical[d]]) physical.push_back(kToLogical[d]);
      }
      if (logical != physical) return false;
    }
    n.args[0].tensor = *cl_[in.node][in.output];
    Arg mapped;
    mapped.kind = Arg::Kind::kList;
    for (int d = 0; d < 4; ++d) {
      if (reduced[d]) mapped.list.push_back(IntArg(kToPhysical[d]));
    }
    std::sort(mapped.list.begin(), mapped.list.end(),
              [](const Arg& a, const Arg& b) { return a.i < b.i; });
    *dims = mapped;
    for (NamedArg& a : n.kwargs) MapArg(a.value, [&](ValueRef r) { return PlainOf(r); });
    if (keepdim) {
      n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
      cl_[i][0] = Emit(std::move(n));
    } else {
      plain_[i][0] = Emit(std::move(n));
    }
    return true;
  }

  // Blocked mean over H and W (global pooling, squeeze-excitation): over
  // dims 2, 3 of [N, C/8, H, W, 8], giving [N, C/8, 1, 1, 8] (the blocked
  // form of [N, C, 1, 1]) or [N, C/8, 8] (the bytes of [N, C]).
  bool RewriteBlockedMean(int i, const std::array<bool, 4>& reduced, bool keepdim) {
    if (reduced != std::array<bool, 4>{false, false, true, true}) return false;
    Node n = old_.nodes[i];
    const ValueRef in = n.args[0].tensor;
    n.args[0].tensor = *cl_[in.node][in.output];
    *FindArg(n, 1, "dim") = IntListArg({2, 3});
    for (NamedArg& a : n.kwargs) MapArg(a.value, [&](ValueRef r) { return PlainOf(r); });
    const std::vector<int64_t> out = n.outputs[0].shape;
    const std::vector<int64_t> logical = Meta(in).shape;
    if (keepdim) {
      n.outputs[0].shape = PhysicalShape(out);
      cl_[i][0] = Emit(std::move(n));
    } else {
      n.outputs[0].shape = {logical[0], logical[1] / kChannelBlock, kChannelBlock};
      const std::string name = n.name;
      plain_[i][0] = View(Emit(std::move(n)), out, absl::StrCat(name, ".nchw_view"));
    }
    return true;
  }

  PassContext& ctx_;
  const Graph old_;  // a copy: the rebuilt node list replaces ctx_.graph's
  const Layout layout_;
  const int view_index_;
  const int permute_index_;
  const Uses uses_;  // of the old graph
  const absl::flat_hash_map<int, ShuffleChain> shuffles_;  // by last node
  const std::vector<std::vector<bool>> wants_cl_;
  std::vector<bool> in_shuffle_;  // a shuffle's steps before its last
  std::vector<Node> nodes_;
  std::vector<const void*> constant_data_;
  // Per old value: its new reference in plain / channels-last order.
  std::vector<std::vector<std::optional<ValueRef>>> plain_, cl_;
};

// Bytes a run moves in reorders when the graph is compiled in `layout`
// (read and write): its explicit conversions (permute steps) and the
// reorders convolutions do inside their kernels for a plain input or
// output. Found by running the rewriter on a copy of the graph.
double ReorderBytes(const PassContext& ctx, Layout layout) {
  Graph graph = ctx.graph;
  std::vector<const void*> constant_data = ctx.constant_data;
  std::vector<ConstantData> created;
  PassContext trial{graph, constant_data, created};
  Rewriter(trial, layout).Run().IgnoreError();  // never fails
  double bytes = 0;
  for (const Node& node : graph.nodes) {
    if (node.kind != Node::Kind::kOp || node.outputs.empty()) continue;
    if (node.target == "aten.permute.default") {
      bytes += 2.0 * static_cast<double>(node.outputs[0].ByteSize());
    } else if (node.target == "kiln.conv2d" && node.args.size() > conv2d_arg::kLayoutOut.pos &&
               node.args[conv2d_arg::kLayoutIn.pos].kind == Arg::Kind::kInt &&
               node.args[conv2d_arg::kLayoutOut.pos].kind == Arg::Kind::kInt) {
      const TensorMeta& in = graph.MetaOf(node.args[conv2d_arg::kInput.pos].tensor);
      // A blocked convolution reads an RGB-like input plain, as it is.
      const bool reads_plain = layout == Layout::kBlocked && in.rank() == 4 &&
                               in.shape[1] % kChannelBlock != 0;
      if (node.args[conv2d_arg::kLayoutIn.pos].i == 0 && !reads_plain) {
        bytes += 2.0 * static_cast<double>(in.ByteSize());
      }
      if (node.args[conv2d_arg::kLayoutOut.pos].i == 0) {
        bytes += 2.0 * static_cast<double>(node.outputs[0].ByteSize());
      }
    }
  }
  return bytes;
}

}  // namespace

absl::Status PropagateChannelsLast(PassContext& ctx) {
  if (ctx.graph.options.layout == LayoutOption::kNchw) return absl::OkStatus();
  bool any_conv = false;
  for (const Node& node : ctx.graph.nodes) {
    any_conv |= !node.dead && node.target == "kiln.conv2d";
  }
  if (!any_conv) return absl::OkStatus();
  const Layout layout =
      ChooseLayout(ctx.graph, [&](Layout l) { return ReorderBytes(ctx, l); });
  Rewriter rewriter(ctx, layout);
  return rewriter.Run();
}

}  // namespace kiln::runtime
