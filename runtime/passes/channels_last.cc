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
// dimension's new position and shufflenet's channel shuffle (ShuffleChain)
// becomes the same permutation of channels within each pixel. Conversions
// are explicit aten.permute nodes (or free
// aten.view aliases when the bytes agree), so the optimized graph's dump
// shows every reorder that remains. Ops with no form in the layout (e.g.
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
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

using Layout = ActivationLayout;

// Arguments of the internal ops the pass reads and writes (ops.def).
constexpr ArgSlot kConvInput = KILN_ARG("kiln.conv2d", "input");
constexpr ArgSlot kConvWeight = KILN_ARG("kiln.conv2d", "weight");
constexpr ArgSlot kConvBias = KILN_ARG("kiln.conv2d", "bias");
constexpr ArgSlot kConvGroups = KILN_ARG("kiln.conv2d", "groups");
constexpr ArgSlot kConvResidual = KILN_ARG("kiln.conv2d", "residual");
constexpr ArgSlot kConvPostOps = KILN_ARG("kiln.conv2d", "post_ops");
constexpr ArgSlot kConvLayoutIn = KILN_ARG("kiln.conv2d", "layout_in");
constexpr ArgSlot kConvLayoutOut = KILN_ARG("kiln.conv2d", "layout_out");
constexpr ArgSlot kBnInput = KILN_ARG("kiln.batch_norm_nhwc", "input");
constexpr ArgSlot kBnWeight = KILN_ARG("kiln.batch_norm_nhwc", "weight");
constexpr ArgSlot kBnBias = KILN_ARG("kiln.batch_norm_nhwc", "bias");
constexpr ArgSlot kBnMean = KILN_ARG("kiln.batch_norm_nhwc", "running_mean");
constexpr ArgSlot kBnVar = KILN_ARG("kiln.batch_norm_nhwc", "running_var");
constexpr ArgSlot kBnEps = KILN_ARG("kiln.batch_norm_nhwc", "eps");

// Logical NCHW dimension d lives at kToPhysical[d] of the NHWC shape.
constexpr std::array<int, 4> kToPhysical = {0, 3, 1, 2};
// Physical NHWC position p holds logical dimension kToLogical[p].
constexpr std::array<int, 4> kToLogical = {0, 2, 3, 1};

// `shape` (rank <= 4) left-padded with ones to rank 4.
std::vector<int64_t> Padded4(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(4 - shape.size(), 1);
  s.insert(s.end(), shape.begin(), shape.end());
  return s;
}

// A rank-4 (or lower, read as left-padded to rank 4) shape whose NCHW
// order and `layout` are the same bytes: C == 1 or H * W == 1 for NHWC;
// H * W == 1 with whole blocks of channels for the blocked layout.
bool LayoutAmbiguous(const std::vector<int64_t>& shape, Layout layout) {
  if (shape.size() > 4) return false;
  const std::vector<int64_t> s = Padded4(shape);
  if (layout == Layout::kBlocked) return s[2] * s[3] == 1 && s[1] % kChannelBlock == 0;
  return s[1] == 1 || s[2] * s[3] == 1;
}

// The argument at (pos, name), positional or keyword; null when absent.
Arg* FindArg(Node& node, size_t pos, const char* name) {
  if (pos < node.args.size()) return &node.args[pos];
  for (NamedArg& kw : node.kwargs) {
    if (kw.name == name) return &kw.value;
  }
  return nullptr;
}

int WrapDim(int64_t d, int rank) { return static_cast<int>(d < 0 ? d + rank : d); }

// Ops the rewriter can run in `layout` (given such inputs): those whose
// traits say they follow it (ops/op_traits.h).
bool RunsInLayout(const Node& node, Layout layout) {
  const OpDef* op = OpOf(node);
  return op != nullptr &&
         FollowsLayout(op->traits, layout == Layout::kBlocked ? kFollowsBlocked : kFollowsNhwc);
}

// permute(x, dims) with dims [0, 2, 3, 1] (or its negative spelling).
bool IsToNhwc(const Node& node) {
  if (node.args.size() != 2 || node.args[1].kind != Arg::Kind::kList ||
      node.args[1].list.size() != 4) {
    return false;
  }
  const std::array<int64_t, 4> want = {0, 2, 3, 1};
  for (int d = 0; d < 4; ++d) {
    const Arg& a = node.args[1].list[d];
    if (a.kind != Arg::Kind::kInt || (a.i < 0 ? a.i + 4 : a.i) != want[d]) return false;
  }
  return true;
}

// A channel shuffle (shufflenet): view(x, [N, g, C/g, H, W]) ->
// permute([0, 2, 1, 3, 4]) -> optional clone -> view([N, C, H, W]), each
// step read only by the next. In channels-last order the same permutation
// of channels is view(x, [N, H, W, g, C/g]) -> permute([0, 1, 2, 4, 3]) ->
// view([N, H, W, C]): the activations need not leave the layout for it.
struct ShuffleChain {
  ValueRef x;                  // the [N, C, H, W] input
  std::vector<int> steps;      // the chain's nodes, first to last
  int64_t groups = 0;
};

bool IsView(const Node& n) { return !n.dead && HasTrait(n, kReshape); }

// The node reading node i's only output, when it is the only reader.
int SoleUser(const Uses& uses, int i) {
  if (uses.users[i].size() != 1 || uses.users[i][0].size() != 1 || uses.is_output[i][0]) {
    return -1;
  }
  return uses.users[i][0][0];
}

// The chain ending at node `last` (the final view), if it is one.
std::optional<ShuffleChain> MatchShuffle(const Graph& g, const Uses& uses, int last) {
  const Node& y = g.nodes[last];
  if (!IsView(y) || y.args.empty() || y.args[0].kind != Arg::Kind::kTensor ||
      y.outputs.size() != 1 || y.outputs[0].rank() != 4 || y.outputs[0].dtype != DType::kF32) {
    return std::nullopt;
  }
  std::vector<int> steps = {last};
  int at = y.args[0].tensor.node;
  auto sole_arg = [&](int node) -> const Node* {
    const Node& n = g.nodes[node];
    if (n.dead || n.kind != Node::Kind::kOp || n.outputs.size() != 1 || n.args.empty() ||
        n.args[0].kind != Arg::Kind::kTensor || SoleUser(uses, node) != steps.back()) {
      return nullptr;
    }
    return &n;
  };
  const Node* n = sole_arg(at);
  if (n != nullptr && n->target == "aten.clone.default") {
    for (size_t a = 1; a < n->args.size(); ++a) {
      if (n->args[a].kind == Arg::Kind::kMemoryFormat && n->args[a].i == 2) return std::nullopt;
    }
    steps.push_back(at);
    at = n->args[0].tensor.node;
    n = sole_arg(at);
  }
  if (n == nullptr || n->target != "aten.permute.default" || n->args.size() != 2 ||
      n->args[1].kind != Arg::Kind::kList || n->args[1].list.size() != 5) {
    return std::nullopt;
  }
  const std::array<int64_t, 5> swap = {0, 2, 1, 3, 4};
  for (int d = 0; d < 5; ++d) {
    const Arg& a = n->args[1].list[d];
    if (a.kind != Arg::Kind::kInt || (a.i < 0 ? a.i + 5 : a.i) != swap[d]) return std::nullopt;
  }
  steps.push_back(at);
  at = n->args[0].tensor.node;
  n = sole_arg(at);
  if (n == nullptr || !IsView(*n) || n->outputs[0].rank() != 5) return std::nullopt;
  steps.push_back(at);
  const ValueRef x = n->args[0].tensor;
  const TensorMeta& in = g.MetaOf(x);
  const std::vector<int64_t>& v = n->outputs[0].shape;  // [N, g, C/g, H, W]
  if (in.rank() != 4 || in.shape != y.outputs[0].shape || v[0] != in.shape[0] ||
      v[1] * v[2] != in.shape[1] || v[3] != in.shape[2] || v[4] != in.shape[3]) {
    return std::nullopt;
  }
  std::reverse(steps.begin(), steps.end());
  return ShuffleChain{x, steps, v[1]};
}

// Every channel shuffle of the graph, by its last node.
absl::flat_hash_map<int, ShuffleChain> FindShuffles(const Graph& g, const Uses& uses) {
  absl::flat_hash_map<int, ShuffleChain> chains;
  for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
    if (std::optional<ShuffleChain> chain = MatchShuffle(g, uses, i)) chains.emplace(i, *chain);
  }
  return chains;
}

// split_with_sizes of a rank-4 f32 tensor.
bool IsSplit(const Graph& g, const Node& n) {
  return n.target == "aten.split_with_sizes.default" && !n.args.empty() &&
         n.args[0].kind == Arg::Kind::kTensor && g.MetaOf(n.args[0].tensor).rank() == 4 &&
         g.MetaOf(n.args[0].tensor).dtype == DType::kF32;
}

// Per value: whether a convolution (directly or through ops that follow
// the layout) reads it, so that producing it in `layout` saves a reorder.
// A convolution whose output only reaches ops that need NCHW keeps a plain
// output (its kernel reorders internally): converting it with a separate
// node would cost the same and add a step. `shuffles`: the channel
// shuffles the layout keeps (FindShuffles; none for the blocked layout).
std::vector<std::vector<bool>> WantsLayout(const Graph& g, Layout layout,
                                           const absl::flat_hash_map<int, ShuffleChain>& shuffles) {
  std::vector<std::vector<bool>> wants(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) wants[i].assign(g.nodes[i].outputs.size(), false);
  for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
    const Node& node = g.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    auto mark = [&](const Arg& a) {
      if (a.kind == Arg::Kind::kTensor) wants[a.tensor.node][a.tensor.output] = true;
    };
    if (node.target == "kiln.conv2d" && node.args.size() > kConvPostOps.pos) {
      mark(node.args[kConvInput.pos]);
      mark(node.args[kConvResidual.pos]);
    } else if (layout == Layout::kNhwc && node.target == "aten.permute.default" &&
               IsToNhwc(node)) {
      // permute(x, [0, 2, 3, 1]) of a channels-last x is free.
      mark(node.args[0]);
    } else if (layout == Layout::kNhwc && IsSplit(g, node)) {
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        if (wants[i][o]) mark(node.args[0]);
      }
    } else if (auto chain = shuffles.find(i); chain != shuffles.end() && wants[i][0]) {
      wants[chain->second.x.node][chain->second.x.output] = true;
    } else if (RunsInLayout(node, layout) && !node.outputs.empty() &&
               (wants[i][0] || (node.outputs[0].rank() == 4 &&
                                LayoutAmbiguous(node.outputs[0].shape, layout)))) {
      // (A global pool's [N, C, 1, 1] output reads the same in both
      // layouts, so computing it from a channels-last input is free.)
      for (const ValueRef& r : TensorInputsOf(node)) wants[r.node][r.output] = true;
    }
  }
  return wants;
}

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
  bool Representable(const TensorMeta& meta) const {
    return meta.dtype == DType::kF32 && HasLayoutForm(meta.shape, layout_);
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

  // The shape a plain broadcast operand (rank <= 4, left-padded) takes to
  // broadcast the same way against values in the graph's layout; nullopt
  // when its bytes would have to move. Channels-last: shapes whose bytes
  // read the same in both orders, permuted. Blocked: a per-pixel operand
  // [n, 1, h, w] as [n, 1, h, w, 1]; a per-channel one [n, c, 1, 1] as
  // [n, c/8, 1, 1, 8].
  std::optional<std::vector<int64_t>> BroadcastShape(const TensorMeta& meta) const {
    if (meta.rank() > 4) return std::nullopt;
    const std::vector<int64_t> s = Padded4(meta.shape);
    if (!blocked()) {
      if (!LayoutAmbiguous(s, layout_)) return std::nullopt;
      return PhysicalShape(s);
    }
    if (s[1] == 1) return std::vector<int64_t>{s[0], 1, s[2], s[3], 1};
    if (s[2] * s[3] == 1 && s[1] % kChannelBlock == 0) return PhysicalShape(s);
    return std::nullopt;
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
    const std::optional<std::vector<int64_t>> shape = BroadcastShape(meta);
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

  // Moves node n's dimension argument (at `pos`, named `name`, default 0)
  // to where that dimension of a rank-4 value sits in the graph's layout.
  // Blocked: N, C (in whole blocks), H and W keep their positions. False
  // when it is not an int naming one of the four dimensions.
  bool RemapDim(Node& n, size_t pos, const char* name) const {
    Arg* dim = FindArg(n, pos, name);
    int64_t d = 0;
    if (dim != nullptr) {
      if (dim->kind != Arg::Kind::kInt) return false;
      d = dim->i;
    }
    if (d < -4 || d > 3) return false;
    const int64_t physical = blocked() ? WrapDim(d, 4) : kToPhysical[WrapDim(d, 4)];
    if (dim != nullptr) {
      *dim = IntArg(physical);
    } else {
      n.args.resize(pos + 1);
      n.args[pos] = IntArg(physical);
    }
    return true;
  }

  // split_with_sizes of a channels-last value along any dimension: the
  // same split along that dimension's channels-last position.
  bool RewriteSplit(int i) {
    Node n = old_.nodes[i];
    const ValueRef in = n.args[0].tensor;
    if (blocked() || !cl_[in.node][in.output] || !n.kwargs.empty()) return false;
    if (!RemapDim(n, 2, "dim")) return false;
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
    if (out.dtype != DType::kF32) return false;
    if (node.target == "aten.permute.default") return !blocked() && RewritePermute(i);
    std::vector<ValueRef> inputs = TensorInputsOf(node);
    bool any_cl = false;
    for (const ValueRef& r : inputs) any_cl |= cl_[r.node][r.output].has_value();
    if (!any_cl) return false;
    if (HasTrait(node, kElementwise) && Representable(out)) return RewriteElementwise(i);
    if (node.target == "aten.cat.default") return RewriteCat(i);
    if (node.target == "aten.mean.dim") return RewriteMean(i);
    if (form != nullptr && RunsInLayout(node, layout_)) return RewriteSameArgs(i, form);
    return false;
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
    n.args.assign(kBnEps.pos + 1, NoneArg());
    n.args[kBnInput.pos] = node.args[0];
    n.args[kBnWeight.pos] = node.args[1];
    n.args[kBnBias.pos] = node.args[2];
    n.args[kBnMean.pos] = node.args[3];
    n.args[kBnVar.pos] = node.args[4];
    n.args[kBnEps.pos] = node.args[eps_pos];
    n.target = form;
    n.op_index = FindOp(n.target);
    Arg& input = n.args[kBnInput.pos];
    const ValueRef in = input.kind == Arg::Kind::kTensor ? input.tensor : ValueRef{};
    if (in.node < 0 || Meta(in).rank() != 4 || !cl_[in.node][in.output]) return false;
    input.tensor = *cl_[in.node][in.output];
    for (size_t a = 0; a < n.args.size(); ++a) {
      if (a == kBnInput.pos) continue;
      MapArg(n.args[a], [&](ValueRef r) { return PlainOf(r); });
    }
    n.outputs.resize(1);
    n.outputs[0].shape = PhysicalShape(n.outputs[0].shape);
    cl_[i][0] = Emit(std::move(n));
    return true;
  }

  bool RewriteConv(int i) {
    Node n = old_.nodes[i];
    if (n.args.size() <= kConvPostOps.pos || !n.kwargs.empty() || n.outputs[0].rank() != 4) {
      return false;
    }
    // Input: in the graph's layout when it already is; the kernel reorders
    // a plain one itself.
    Arg& input = n.args[kConvInput.pos];
    const ValueRef in = input.tensor;
    std::optional<ValueRef> in_cl = cl_[in.node][in.output];
    input.tensor = in_cl ? *in_cl : PlainOf(in);
    Arg& weight = n.args[kConvWeight.pos];
    weight.tensor = PlainOf(weight.tensor);
    Arg& bias = n.args[kConvBias.pos];
    if (bias.kind == Arg::Kind::kTensor) bias.tensor = PlainOf(bias.tensor);
    const bool out_cl = wants_cl_[i][0] && Representable(n.outputs[0]);
    Arg& residual = n.args[kConvResidual.pos];
    if (residual.kind == Arg::Kind::kTensor && out_cl) {
      // The residual is added in the output's layout.
      const ValueRef res = residual.tensor;
      std::optional<ValueRef> res_cl = ChannelsLastOf(res);
      residual.tensor = res_cl ? *res_cl : ToLayout(PlainOf(res), Meta(res).shape, NameOf(res));
    }
    if (residual.kind == Arg::Kind::kTensor && !out_cl) residual.tensor = PlainOf(residual.tensor);
    n.args.resize(kConvLayoutOut.pos + 1);
    n.args[kConvLayoutIn.pos] = IntArg(static_cast<int64_t>(in_cl ? layout_ : Layout::kPlain));
    n.args[kConvLayoutOut.pos] = IntArg(static_cast<int64_t>(out_cl ? layout_ : Layout::kPlain));
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
      if (!BroadcastShape(m)) return false;
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
    if (!RemapDim(n, 1, "dim")) return false;
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
struct LayoutCost {
  double nhwc = 0, blocked = 0;  // estimated seconds
};

LayoutCost EstimateConv(const Graph& g, const Node& node) {
  LayoutCost cost;
  if (node.args.size() <= kConvGroups.pos || node.args[kConvInput.pos].kind != Arg::Kind::kTensor ||
      node.args[kConvWeight.pos].kind != Arg::Kind::kTensor || node.outputs.empty()) {
    return cost;
  }
  const TensorMeta& in = g.MetaOf(node.args[kConvInput.pos].tensor);
  const TensorMeta& w = g.MetaOf(node.args[kConvWeight.pos].tensor);
  const TensorMeta& out = node.outputs[0];
  if (in.rank() != 4 || w.rank() != 4 || out.rank() != 4) return cost;
  const Arg& groups_arg = node.args[kConvGroups.pos];
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
    } else if (node.target == "kiln.conv2d" && node.args.size() == kConvLayoutOut.pos + 1 &&
               node.args[kConvLayoutIn.pos].kind == Arg::Kind::kInt &&
               node.args[kConvLayoutOut.pos].kind == Arg::Kind::kInt) {
      const TensorMeta& in = graph.MetaOf(node.args[kConvInput.pos].tensor);
      // A blocked convolution reads an RGB-like input plain, as it is.
      const bool reads_plain = layout == Layout::kBlocked && in.rank() == 4 &&
                               in.shape[1] % kChannelBlock != 0;
      if (node.args[kConvLayoutIn.pos].i == 0 && !reads_plain) {
        bytes += 2.0 * static_cast<double>(in.ByteSize());
      }
      if (node.args[kConvLayoutOut.pos].i == 0) {
        bytes += 2.0 * static_cast<double>(node.outputs[0].ByteSize());
      }
    }
  }
  return bytes;
}

Layout ChooseLayout(const PassContext& ctx) {
  const Graph& g = ctx.graph;
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
  total.nhwc += ReorderBytes(ctx, Layout::kNhwc) / kReorderBytesPerSecond;
  total.blocked += ReorderBytes(ctx, Layout::kBlocked) / kReorderBytesPerSecond;
  // A margin: small differences are within the estimates' error, and
  // NHWC is the layout every op of the pass has a form in.
  return total.blocked < 0.9 * total.nhwc ? Layout::kBlocked : Layout::kNhwc;
}

}  // namespace

absl::Status PropagateChannelsLast(PassContext& ctx) {
  if (ctx.graph.options.layout == LayoutOption::kNchw) return absl::OkStatus();
  bool any_conv = false;
  for (const Node& node : ctx.graph.nodes) {
    any_conv |= !node.dead && node.target == "kiln.conv2d";
  }
  if (!any_conv) return absl::OkStatus();
  Rewriter rewriter(ctx, ChooseLayout(ctx));
  return rewriter.Run();
}

}  // namespace kiln::runtime
