#include <cmath>
// Layout propagation (passes/channels_last.cc), end to end through
// Compile(): a small CNN with the patterns of the torchvision list (pooling,
// a concatenation feeding an unfolded batch norm, squeeze-excitation, a
// global pool and flatten) compiles channels-last without a single reorder
// step, and in the blocked layout with reorders only where an op has no
// blocked form; both give the same answer as the graph compiled in plain
// NCHW.
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/util/sha256.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/constant_table.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::None;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

kiln::v1::Argument Tensors(const std::vector<int>& nodes) {
  kiln::v1::Argument a;
  for (int n : nodes) *a.mutable_list()->add_items() = Ref(n);
  return a;
}

int CountSteps(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const CompiledStep& s : cg.steps) n += cg.graph.nodes[s.node].target == target;
  return n;
}

class SmallCnn : public ::testing::Test {
 protected:
  int Const(GraphBuilder& b, std::vector<int64_t> shape, float lo, float hi) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data_.push_back(UniformFloats(n, lo, hi, static_cast<int>(data_.size()) + 1));
    return b.Constant(data_.back(), shape);
  }
  int Conv(GraphBuilder& b, int x, int64_t ic, int64_t oc, int64_t k, const std::string& name) {
    return Conv(b, Ref(x), ic, oc, k, name);
  }
  // A 3x3 convolution of c channels in `groups` groups, no bias (groups = c:
  // depthwise).
  int Grouped3x3(GraphBuilder& b, int x, int64_t c, int64_t groups, const std::string& name) {
    const int w = Const(b, {c, c / groups, 3, 3}, -0.3f, 0.3f);
    return b.Call("aten.convolution.default",
                  {Ref(x), Ref(w), None(), IntList({1, 1}), IntList({1, 1}), IntList({1, 1}),
                   Bool(false), IntList({0, 0}), Int(groups)},
                  name);
  }
  // Conv with the input given as an argument (e.g. one output of a split).
  int Conv(GraphBuilder& b, const kiln::v1::Argument& x, int64_t ic, int64_t oc, int64_t k,
           const std::string& name) {
    const int w = Const(b, {oc, ic, k, k}, -0.3f, 0.3f);
    const int bias = Const(b, {oc}, -0.1f, 0.1f);
    return b.Call("aten.convolution.default",
                  {x, Ref(w), Ref(bias), IntList({1, 1}), IntList({k / 2, k / 2}),
                   IntList({1, 1}), Bool(false), IntList({0, 0}), Int(1)},
                  name);
  }

  kiln::v1::Graph Build() {
    GraphBuilder b;
    const int x = b.Input({2, 4, 9, 9}, "x");
    const int c1 = Conv(b, x, 4, 8, 3, "c1");
    const int r1 = b.Call("aten.relu.default", {Ref(c1)}, "r1");
    const int pool = b.Call("aten.max_pool2d_with_indices.default",
                            {Ref(r1), IntList({3, 3}), IntList({2, 2}), IntList({1, 1})}, "pool");
    // DenseNet's join: the block's input beside a convolution of it, so
    // the batch norm after it folds into no convolution.
    const int bb = Conv(b, pool, 8, 8, 3, "b");
    const int cat = b.Call("aten.cat.default", {Tensors({pool, bb}), Int(1)}, "cat");
    const int bn = b.Call("aten.native_batch_norm.default",
                          {Ref(cat), Ref(Const(b, {16}, 0.5f, 1.5f)),
                           Ref(Const(b, {16}, -0.5f, 0.5f)), Ref(Const(b, {16}, -0.2f, 0.2f)),
                           Ref(Const(b, {16}, 0.5f, 2.f)), Bool(false), Float(0.1), Float(1e-5)},
                          "bn");
    const int r2 = b.Call("aten.relu.default", {Ref(bn, 0)}, "r2");
    const int c2 = Conv(b, r2, 16, 8, 3, "c2");
    // Squeeze-excitation: mean over H, W -> 1x1 convs -> sigmoid -> scale.
    const int m = b.Call("aten.mean.dim", {Ref(c2), IntList({-1, -2}), Bool(true)}, "se_mean");
    const int s1 = Conv(b, m, 8, 4, 1, "se1");
    const int s2 = Conv(b, b.Call("aten.relu.default", {Ref(s1)}), 4, 8, 1, "se2");
    const int gate = b.Call("aten.sigmoid.default", {Ref(s2)}, "gate");
    const int scaled = b.Call("aten.mul.Tensor", {Ref(c2), Ref(gate)}, "scaled");
    const int avg = b.Call("aten.avg_pool2d.default",
                           {Ref(scaled), IntList({2, 2}), IntList({2, 2})}, "avg");
    const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(avg), IntList({1, 1})}, "gp");
    b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));
    return b.graph();
  }

  ConstantResolver Resolver() {
    return [this](const std::string& h) -> absl::StatusOr<ConstantData> {
      for (const auto& v : data_) {
        if (Sha256Hex(v.data(), v.size() * 4) == h) {
          return ConstantData{std::shared_ptr<const uint8_t>(
                                  reinterpret_cast<const uint8_t*>(v.data()), [](const uint8_t*) {}),
                              static_cast<int64_t>(v.size() * 4)};
        }
      }
      return absl::NotFoundError(h);
    };
  }

  // The graph compiled with its layout option set to `layout`.
  absl::StatusOr<std::unique_ptr<CompiledGraph>> CompileAs(const kiln::v1::Graph& proto,
                                                           LayoutOption layout) {
    Graph graph = *GraphFromProto(proto);
    graph.options.layout = layout;
    return Compile(std::move(graph), Resolver());
  }

  std::vector<float> Run(const CompiledGraph& cg, const std::vector<float>& x) {
    std::vector<float> y(2 * 8);
    const void* in[] = {x.data()};
    void* out[] = {y.data()};
    EXPECT_TRUE(Execute(cg, in, out).ok());
    return y;
  }

  // Compiles `proto` (input [2, 4, 9, 9], output [2, 8]) channels-last and
  // plain, expects no reorder step in the first and the same answer from
  // both; returns the channels-last compile (null when either failed).
  std::unique_ptr<CompiledGraph> ChannelsLastAgreeingWithPlain(const kiln::v1::Graph& proto,
                                                               int seed) {
    auto cl = CompileAs(proto, LayoutOption::kNhwc);
    auto plain = CompileAs(proto, LayoutOption::kNchw);
    if (!cl.ok() || !plain.ok()) {
      ADD_FAILURE() << cl.status() << " / " << plain.status();
      return nullptr;
    }
    EXPECT_EQ(CountSteps(**cl, "aten.permute.default"), 0) << DumpCompiledGraph(**cl);
    const std::vector<float> in = UniformFloats(2 * 4 * 9 * 9, -1.f, 1.f, seed);
    const std::vector<float> a = Run(**cl, in), want = Run(**plain, in);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
    }
    return std::move(*cl);
  }

  std::vector<std::vector<float>> data_;
};

TEST_F(SmallCnn, RunsChannelsLastWithoutReorderSteps) {
  const kiln::v1::Graph proto = Build();
  auto cl = CompileAs(proto, LayoutOption::kNhwc);
  ASSERT_TRUE(cl.ok()) << cl.status();
  const std::string dump = DumpCompiledGraph(**cl);
  EXPECT_EQ(CountSteps(**cl, "aten.permute.default"), 0) << dump;
  EXPECT_EQ(CountSteps(**cl, "kiln.max_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**cl, "kiln.batch_norm_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**cl, "kiln.avg_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**cl, "kiln.adaptive_avg_pool2d_nhwc"), 1) << dump;

  auto plain = CompileAs(proto, LayoutOption::kNchw);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(CountSteps(**plain, "kiln.max_pool2d_nhwc"), 0);

  const std::vector<float> x = UniformFloats(2 * 4 * 9 * 9, -1.f, 1.f, 99);
  const std::vector<float> a = Run(**cl, x), b = Run(**plain, x);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
}

// A GhostNet module: a convolution and a cheap depthwise one on its output,
// concatenated, then the first channels kept by a slice, all channels-last.
// With every channel kept, the slice is an alias: that too.
class GhostModule : public SmallCnn, public ::testing::WithParamInterface<bool> {};

TEST_P(GhostModule, SliceOfChannelsStaysChannelsLast) {
  const bool whole = GetParam();
  GraphBuilder b;
  const int x = b.Input({2, 4, 9, 9}, "x");
  const int primary = Conv(b, x, 4, 8, 1, "primary");
  const int cheap = Grouped3x3(b, primary, 8, 8, "cheap");
  const int cat = b.Call("aten.cat.default", {Tensors({primary, cheap}), Int(1)}, "cat");
  const int kept = whole ? b.Call("aten.alias.default", {Ref(cat)}, "kept")
                         : b.Call("aten.slice.Tensor", {Ref(cat), Int(1), Int(0), Int(12)}, "kept");
  const int c2 = Conv(b, kept, whole ? 16 : 12, 8, 3, "c2");
  const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(c2), IntList({1, 1})}, "gp");
  b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));
  const kiln::v1::Graph proto = b.graph();

  const std::unique_ptr<CompiledGraph> cl = ChannelsLastAgreeingWithPlain(proto, 96);
  ASSERT_NE(cl, nullptr);
}

INSTANTIATE_TEST_SUITE_P(SliceOrAlias, GhostModule, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Alias" : "Slice";
                         });

// A PoolFormer block: group norm, then average pooling (without the pad
// in its counts) minus its input, between convolutions, all channels-last.
TEST_F(SmallCnn, GroupNormStaysChannelsLast) {
  GraphBuilder b;
  const int x = b.Input({2, 4, 9, 9}, "x");
  const int c1 = Conv(b, x, 4, 8, 3, "c1");
  const int gn = b.Call("aten.native_group_norm.default",
                        {Ref(c1), Ref(Const(b, {8}, 0.5f, 1.5f)), Ref(Const(b, {8}, -0.5f, 0.5f)),
                         Int(2), Int(8), Int(81), Int(2), Float(1e-5)},
                        "gn");
  const int pool = b.Call("aten.avg_pool2d.default",
                          {Ref(gn, 0), IntList({3, 3}), IntList({1, 1}), IntList({1, 1}),
                           Bool(false), Bool(false)},
                          "pool");
  const int diff = b.Call("aten.sub.Tensor", {Ref(pool), Ref(gn, 0)}, "diff");
  const int c2 = Conv(b, diff, 8, 8, 3, "c2");
  const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(c2), IntList({1, 1})}, "gp");
  b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));
  const kiln::v1::Graph proto = b.graph();

  const std::unique_ptr<CompiledGraph> cl = ChannelsLastAgreeingWithPlain(proto, 97);
  ASSERT_NE(cl, nullptr);
  const std::string dump = DumpCompiledGraph(*cl);
  EXPECT_EQ(CountSteps(*cl, "kiln.group_norm_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(*cl, "kiln.avg_pool2d_nhwc"), 1) << dump;
}

// Pads of a channels-last value stay channels-last: a pool's -inf padding
// on one side (TensorFlow's "same" padding), a pad of the channels with
// another value and a crop (negative pads), with no reorder in between and
// the answer of the plain graph.
TEST_F(SmallCnn, PadsStayChannelsLast) {
  GraphBuilder b;
  const int x = b.Input({2, 4, 9, 9}, "x");
  const int c1 = Conv(b, x, 4, 8, 3, "c1");
  const int neg_inf = b.Call("aten.constant_pad_nd.default",
                             {Ref(c1), IntList({0, 1, 0, 1}), Float(-INFINITY)}, "pool_pad");
  const int pool = b.Call("aten.max_pool2d_with_indices.default",
                          {Ref(neg_inf), IntList({3, 3}), IntList({2, 2})}, "pool");
  const int channels = b.Call("aten.constant_pad_nd.default",
                              {Ref(pool, 0), IntList({1, 0, 0, 2, 1, 0}), Float(0.5)},
                              "channel_pad");  // [2, 9, 6, 5]
  const int crop = b.Call("aten.constant_pad_nd.default",
                          {Ref(channels), IntList({-1, 0, 0, -1})}, "crop");  // [2, 9, 5, 4]
  const int c2 = Conv(b, crop, 9, 8, 3, "c2");
  const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(c2), IntList({1, 1})}, "gp");
  b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));
  const kiln::v1::Graph proto = b.graph();

  const std::unique_ptr<CompiledGraph> cl = ChannelsLastAgreeingWithPlain(proto, 98);
  ASSERT_NE(cl, nullptr);
  const std::string dump = DumpCompiledGraph(*cl);
  EXPECT_EQ(CountSteps(*cl, "kiln.max_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(*cl, "aten.constant_pad_nd.default"), 3) << dump;
}

// A PT2E-quantized block: the activation between two convolutions goes
// through quantize (to u8) and dequantize per tensor, which are
// elementwise, so the u8 value stays channels-last too and no reorder
// remains around them.
TEST_F(SmallCnn, QuantizedActivationsStayChannelsLast) {
  GraphBuilder b;
  const int x = b.Input({2, 4, 9, 9}, "x");
  const int r1 = b.Call("aten.relu.default", {Ref(Conv(b, x, 4, 8, 3, "c1"))}, "r1");
  kiln::v1::Argument u8;
  u8.set_dtype(kiln::v1::UINT8);
  const int q = b.Call("quantized_decomposed.quantize_per_tensor.default",
                       {Ref(r1), Float(0.013), Int(3), Int(0), Int(255), u8}, "q");
  const int dq = b.Call("quantized_decomposed.dequantize_per_tensor.default",
                        {Ref(q), Float(0.013), Int(3), Int(0), Int(255), u8}, "dq");
  const int c2 = Conv(b, dq, 8, 8, 3, "c2");
  const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(c2), IntList({1, 1})}, "gp");
  b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));

  const std::unique_ptr<CompiledGraph> cl = ChannelsLastAgreeingWithPlain(b.graph(), 97);
  ASSERT_NE(cl, nullptr);
  // The u8 value in its channels-last shape [N, H, W, C], between two
  // convolutions that read and write channels-last.
  const std::string dump = DumpCompiledGraph(*cl);
  EXPECT_NE(dump.find(": u8[2,9,9,8]"), std::string::npos) << dump;
  EXPECT_EQ(CountSteps(*cl, "quantized_decomposed.dequantize_per_tensor.default"), 1) << dump;
}

// Shufflenet units: the channel shuffle (view to [N, 2, C/2, H, W],
// transpose of the two channel dims, contiguous, view back) and the split
// of the channels into the two branches stay channels-last, so no value
// leaves the layout between the first convolution and the pooled output.
TEST_F(SmallCnn, ChannelShuffleAndSplitStayChannelsLast) {
  auto build = [&](bool with_clone) {
    data_.clear();
    GraphBuilder b;
    const int x = b.Input({2, 3, 8, 8}, "x");
    int y = b.Call("aten.relu.default", {Ref(Conv(b, x, 3, 16, 3, "stem"))}, "stem_relu");
    for (int unit = 0; unit < 2; ++unit) {
      const std::string u = std::to_string(unit);
      const int split = b.Call("aten.split_with_sizes.default",
                               {Ref(y), IntList({8, 8}), Int(1)}, "split" + u);
      // A 1x1 convolution of the split's second half.
      const int conv = Conv(b, Ref(split, 1), 8, 8, 1, "conv" + u);
      const int branch = b.Call("aten.relu.default", {Ref(conv)}, "relu" + u);
      const int cat = b.Call("aten.cat.default", {Tensors({split, branch}), Int(1)}, "cat" + u);
      const int grouped = b.Call("aten.view.default", {Ref(cat), IntList({2, 2, 8, 8, 8})},
                                 "groups" + u);
      int swapped = b.Call("aten.permute.default", {Ref(grouped), IntList({0, 2, 1, 3, 4})},
                           "swap" + u);
      if (with_clone) swapped = b.Call("aten.clone.default", {Ref(swapped)}, "contig" + u);
      y = b.Call("aten.view.default", {Ref(swapped), IntList({2, 16, 8, 8})}, "shuffled" + u);
    }
    const int head = Conv(b, y, 16, 8, 1, "head");
    b.Output(b.Call("aten.mean.dim", {Ref(head), IntList({-1, -2})}, "pool"));
    return b.graph();
  };
  for (bool with_clone : {true, false}) {
    const kiln::v1::Graph proto = build(with_clone);
    auto cl = CompileAs(proto, LayoutOption::kNhwc);
    ASSERT_TRUE(cl.ok()) << cl.status();
    const std::string dump = DumpCompiledGraph(**cl);
    // The two shuffles (permutes on [N, H, W, 2, C/2]) with their cats and
    // the split after the first run as kiln.interleave_channels
    // (passes/fuse_channel_shuffle.cc); nothing converts to or from NCHW,
    // and every convolution after the stem reads channels-last (the head
    // writes the plain value the mean reads).
    EXPECT_EQ(CountSteps(**cl, "aten.permute.default"), 0) << dump;
    EXPECT_EQ(CountSteps(**cl, "kiln.interleave_channels"), 2) << dump;
    EXPECT_EQ(dump.find("to_nchw"), std::string::npos) << dump;
    EXPECT_EQ(dump.find("to_nhwc"), std::string::npos) << dump;
    int convs = 0;
    for (const CompiledStep& step : (*cl)->steps) {
      const Node& node = (*cl)->graph.nodes[step.node];
      if (node.target != "kiln.conv2d") continue;
      ++convs;
      if (convs > 1) {
        EXPECT_EQ(node.args[9].i, 1) << dump;
      }
    }
    EXPECT_EQ(convs, 4) << dump;

    auto plain = CompileAs(proto, LayoutOption::kNchw);
    ASSERT_TRUE(plain.ok()) << plain.status();
    const std::vector<float> x = UniformFloats(2 * 3 * 8 * 8, -1.f, 1.f, 7);
    std::vector<float> a(2 * 8), b(2 * 8);
    const void* in[] = {x.data()};
    void* out_a[] = {a.data()};
    void* out_b[] = {b.data()};
    ASSERT_TRUE(Execute(**cl, in, out_a).ok());
    ASSERT_TRUE(Execute(**plain, in, out_b).ok());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
  }
}

// Every pattern the blocked layout handles, and the ones it converts for:
// an RGB input (the first convolution reads it plain), max pooling, a
// concatenation of blocked parts, a depthwise convolution, a residual add
// fused into a convolution, a convolution with 12 output channels (no
// blocked form: its output stays plain), an unfolded batch norm (converted
// to plain), squeeze-excitation (mean with keepdim, a per-channel gate),
// per-pixel and per-channel broadcast operands, average and global
// pooling, and a mean without keepdim as a second output.
class BlockedCnn : public SmallCnn {
 protected:
  int DwConv(GraphBuilder& b, int x, int64_t c, int64_t stride, const std::string& name) {
    const int w = Const(b, {c, 1, 3, 3}, -0.3f, 0.3f);
    const int bias = Const(b, {c}, -0.1f, 0.1f);
    return b.Call("aten.convolution.default",
                  {Ref(x), Ref(w), Ref(bias), IntList({stride, stride}), IntList({1, 1}),
                   IntList({1, 1}), Bool(false), IntList({0, 0}), Int(c)},
                  name);
  }

  kiln::v1::Graph Build() {
    GraphBuilder b;
    const int x = b.Input({2, 3, 16, 16}, "x");
    const int mask = b.Input({2, 1, 8, 8}, "mask");
    const int c1 = b.Call("aten.relu.default", {Ref(Conv(b, x, 3, 16, 3, "c1"))}, "r1");
    const int pool = b.Call("aten.max_pool2d_with_indices.default",
                            {Ref(c1), IntList({3, 3}), IntList({2, 2}), IntList({1, 1})}, "pool");
    const int a = Conv(b, pool, 16, 8, 1, "a");
    const int bb = Conv(b, pool, 16, 16, 3, "b");
    const int cat = b.Call("aten.cat.default", {Tensors({a, bb}), Int(1)}, "cat");
    const int dw = b.Call("aten.hardtanh.default",
                          {Ref(DwConv(b, cat, 24, 1, "dw")), Float(0.0), Float(6.0)}, "dw6");
    const int proj = Conv(b, dw, 24, 24, 1, "proj");
    const int res = b.Call("aten.relu.default",
                           {Ref(b.Call("aten.add.Tensor", {Ref(proj), Ref(cat)}, "res_add"))},
                           "res");
    const int odd = Conv(b, res, 24, 12, 3, "odd");  // 12 channels: no blocked form
    const int c2 = Conv(b, odd, 12, 16, 1, "c2");
    const int bn = b.Call("aten.native_batch_norm.default",
                          {Ref(res), Ref(Const(b, {24}, 0.5f, 1.5f)),
                           Ref(Const(b, {24}, -0.5f, 0.5f)), Ref(Const(b, {24}, -0.2f, 0.2f)),
                           Ref(Const(b, {24}, 0.5f, 2.f)), Bool(false), Float(0.1), Float(1e-5)},
                          "bn");
    const int c3 = Conv(b, b.Call("aten.relu.default", {Ref(bn, 0)}, "r2"), 24, 16, 3, "c3");
    const int join = b.Call("aten.add.Tensor", {Ref(c2), Ref(c3)}, "join");
    const int m = b.Call("aten.mean.dim", {Ref(join), IntList({-1, -2}), Bool(true)}, "se_mean");
    const int s1 = Conv(b, m, 16, 8, 1, "se1");
    const int s2 = Conv(b, b.Call("aten.relu.default", {Ref(s1)}), 8, 16, 1, "se2");
    const int gate = b.Call("aten.sigmoid.default", {Ref(s2)}, "gate");
    const int scaled = b.Call("aten.mul.Tensor", {Ref(join), Ref(gate)}, "scaled");
    const int masked = b.Call("aten.mul.Tensor", {Ref(scaled), Ref(mask)}, "masked");
    const int shifted =
        b.Call("aten.add.Tensor", {Ref(masked), Ref(Const(b, {16, 1, 1}, -1.f, 1.f))}, "shift");
    const int c4 = Conv(b, shifted, 16, 16, 1, "c4");
    const int avg = b.Call("aten.avg_pool2d.default",
                           {Ref(c4), IntList({2, 2}), IntList({2, 2})}, "avg");
    const int gp = b.Call("aten._adaptive_avg_pool2d.default", {Ref(avg), IntList({1, 1})}, "gp");
    b.Output(b.Call("aten.flatten.using_ints", {Ref(gp), Int(1)}, "flat"));
    b.Output(b.Call("aten.mean.dim", {Ref(c4), IntList({2, 3})}, "gmean"));
    return b.graph();
  }

  // Both outputs, [2, 16] each, one after the other.
  std::vector<float> RunBoth(const CompiledGraph& cg, const std::vector<float>& x,
                             const std::vector<float>& mask) {
    std::vector<float> y(2 * 2 * 16);
    const void* in[] = {x.data(), mask.data()};
    void* out[] = {y.data(), y.data() + 2 * 16};
    EXPECT_TRUE(Execute(cg, in, out).ok());
    return y;
  }
};

TEST_F(BlockedCnn, MatchesNchwWithReordersOnlyWhereNoBlockedFormExists) {
  const kiln::v1::Graph proto = Build();
  auto blocked = CompileAs(proto, LayoutOption::kBlocked);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  const std::string dump = DumpCompiledGraph(**blocked);
  // The one reorder: the unfolded batch norm's input, back to NCHW. The
  // 12-channel convolution writes NCHW itself and the next one reads it.
  EXPECT_EQ(CountSteps(**blocked, "aten.permute.default"), 1) << dump;
  EXPECT_NE(dump.find("res.to_nchw"), std::string::npos) << dump;
  EXPECT_EQ(CountSteps(**blocked, "kiln.max_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**blocked, "kiln.avg_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**blocked, "kiln.adaptive_avg_pool2d_nhwc"), 1) << dump;
  EXPECT_EQ(CountSteps(**blocked, "kiln.batch_norm_nhwc"), 0) << dump;
  EXPECT_NE(dump.find("f32[2,2,8,8,8]"), std::string::npos) << dump;  // blocked values

  auto plain = CompileAs(proto, LayoutOption::kNchw);
  ASSERT_TRUE(plain.ok()) << plain.status();

  const std::vector<float> x = UniformFloats(2 * 3 * 16 * 16, -1.f, 1.f, 99);
  const std::vector<float> mask = UniformFloats(2 * 8 * 8, 0.f, 1.f, 98);
  const std::vector<float> a = RunBoth(**blocked, x, mask), b = RunBoth(**plain, x, mask);
  // Both compute in f32 with different summation orders (oneDNN's blocked
  // and NHWC kernels): agreement to about 1e-5 relative.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i]))) << i;
}

TEST_F(BlockedCnn, ForcedChannelsLastMatchesNchwToo) {
  const kiln::v1::Graph proto = Build();
  auto nhwc = CompileAs(proto, LayoutOption::kNhwc);
  ASSERT_TRUE(nhwc.ok()) << nhwc.status();
  auto plain = CompileAs(proto, LayoutOption::kNchw);
  ASSERT_TRUE(plain.ok()) << plain.status();
  const std::vector<float> x = UniformFloats(2 * 3 * 16 * 16, -1.f, 1.f, 97);
  const std::vector<float> mask = UniformFloats(2 * 8 * 8, 0.f, 1.f, 96);
  const std::vector<float> a = RunBoth(**nhwc, x, mask), b = RunBoth(**plain, x, mask);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i]))) << i;
}

// layout=auto: NHWC on AVX-512; on AVX2 blocked for a mobilenet-style
// stack (1x1 and large depthwise convolutions) and NHWC for wide dense 3x3
// convolutions, where oneDNN's NHWC kernel is faster.
TEST_F(SmallCnn, AutoLayoutFollowsTheConvolutionMix) {
  auto compile = [&](bool mobile) {
    GraphBuilder b;
    int x = b.Input({1, mobile ? 32 : 256, mobile ? 56 : 14, mobile ? 56 : 14}, "x");
    if (mobile) {
      x = Conv(b, x, 32, 192, 1, "expand");
      x = Grouped3x3(b, x, 192, 192, "dw");
      x = Conv(b, x, 192, 32, 1, "project");
    } else {
      x = Conv(b, Conv(b, x, 256, 256, 3, "c1"), 256, 256, 3, "c2");
    }
    b.Output(b.Call("aten.mean.dim", {Ref(x), IntList({2, 3})}, "pool"));
    auto cg = Compile(*GraphFromProto(b.graph()), Resolver());
    EXPECT_TRUE(cg.ok()) << cg.status();
    return DumpCompiledGraph(**cg);
  };
  const std::string mobile = compile(true), wide = compile(false);
  const bool expect_blocked = !HasAvx512Kernels();
  EXPECT_EQ(mobile.find(",8]") != std::string::npos, expect_blocked) << mobile;
  EXPECT_EQ(wide.find(",8]"), std::string::npos) << wide;
}

// A ResNeXt block (1x1, 3x3 in groups of 4 channels, 1x1) and another
// 1x1: the 1x1 convolutions alone would pick blocked on AVX2, but oneDNN has no blocked
// kernel for groups narrower than a block (it falls back to its reference
// kernel, far slower than NHWC), so the graph stays NHWC.
TEST_F(SmallCnn, AutoLayoutKeepsNarrowGroupsChannelsLast) {
  GraphBuilder b;
  int x = b.Input({1, 256, 56, 56}, "x");
  x = Conv(b, x, 256, 64, 1, "reduce");
  x = Grouped3x3(b, x, 64, 16, "grouped");
  x = Conv(b, x, 64, 256, 1, "expand");
  x = Conv(b, x, 256, 256, 1, "mix");
  b.Output(b.Call("aten.mean.dim", {Ref(x), IntList({2, 3})}, "pool"));
  auto cg = Compile(*GraphFromProto(b.graph()), Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  EXPECT_EQ(dump.find(",8]"), std::string::npos) << dump;
}

TEST_F(SmallCnn, ConvolutionFeedingOnlyAGraphOutputStaysPlain) {
  GraphBuilder b;
  const int x = b.Input({1, 3, 5, 5}, "x");
  b.Output(Conv(b, x, 3, 4, 3, "conv"));
  auto cg = Compile(*GraphFromProto(b.graph()), Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  // One step: the kernel reorders internally instead of a separate node.
  EXPECT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->output_metas[0].shape, (std::vector<int64_t>{1, 4, 5, 5}));
}

}  // namespace
}  // namespace kiln::runtime
