// FoldConvPadding through Compile(): a zero constant_pad_nd in front of a
// convolution becomes the convolution's (possibly uneven) padding, with
// results equal to a double-precision reference of the ATen graph; pads
// of other values stay pads.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/reference_conv.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::runtime::testing::ReferenceConv2d;
using kiln::testing::UniformFloats;

struct Case {
  const char* name;
  int c, hw, oc, k, stride, conv_pad, groups;
  std::vector<int64_t> pad;  // constant_pad_nd's [left, right, top, bottom]
  double value;              // the pad's fill
  bool stem;                 // a 3x3 convolution first: the pad's input is channels-last
  bool pad_is_output;        // the padded tensor is a graph output too
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// x [C, H, W] padded by `pad` with `value`, in double.
std::vector<double> Pad(const std::vector<double>& x, int c, int h, int w,
                        const std::vector<int64_t>& pad, double value, int* ph, int* pw) {
  const int l = pad[0], r = pad[1], t = pad.size() > 2 ? pad[2] : 0,
            b = pad.size() > 2 ? pad[3] : 0;
  *ph = h + t + b;
  *pw = w + l + r;
  std::vector<double> out(static_cast<size_t>(c) * *ph * *pw, value);
  for (int i = 0; i < c; ++i)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < w; ++xx) out[(i * *ph + y + t) * *pw + xx + l] = x[(i * h + y) * w + xx];
  return out;
}

int CountSteps(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const auto& step : cg.steps) n += cg.graph.nodes[step.node].target == target;
  return n;
}

class FoldConvPaddingTest : public ::testing::TestWithParam<Case> {};

TEST_P(FoldConvPaddingTest, MatchesThePaddedConvolution) {
  const Case& p = GetParam();
  const int sc = p.c;  // the stem keeps the channel count
  const std::vector<float> stem_w = UniformFloats(sc * p.c * 9, -0.3f, 0.3f, 1),
                           stem_b = UniformFloats(sc, -0.5f, 0.5f, 2),
                           w = UniformFloats(p.oc * (p.c / p.groups) * p.k * p.k, -0.3f, 0.3f, 3),
                           b = UniformFloats(p.oc, -0.5f, 0.5f, 4);
  kiln::testing::ConstantTable consts;
  for (const auto* v : {&stem_w, &stem_b, &w, &b}) consts.Add(*v);

  GraphBuilder g;
  int x = g.Input({1, p.c, p.hw, p.hw}, "x");
  int in = x;
  if (p.stem) {
    int cw = g.Constant(stem_w, {sc, p.c, 3, 3}), cb = g.Constant(stem_b, {sc});
    in = g.Call("aten.convolution.default",
                {Ref(x), Ref(cw), Ref(cb), IntList({1, 1}), IntList({1, 1}), IntList({1, 1}),
                 Bool(false), IntList({0, 0}), Int(1)},
                "stem");
  }
  std::vector<int64_t> pad = p.pad;
  int padded = g.Call("aten.constant_pad_nd.default",
                      {Ref(in), IntList(pad), Float(p.value)}, "pad");
  int cw = g.Constant(w, {p.oc, p.c / p.groups, p.k, p.k}), cb = g.Constant(b, {p.oc});
  int y = g.Call("aten.convolution.default",
                 {Ref(padded), Ref(cw), Ref(cb), IntList({p.stride, p.stride}),
                  IntList({p.conv_pad, p.conv_pad}), IntList({1, 1}), Bool(false),
                  IntList({0, 0}), Int(p.groups)},
                 "conv");
  g.Output(y);
  if (p.pad_is_output) g.Output(padded);
  auto cg = Compile(*GraphFromProto(g.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  const bool folds = p.value == 0.0;
  EXPECT_EQ(CountSteps(**cg, "aten.constant_pad_nd.default"), folds && !p.pad_is_output ? 0 : 1)
      << dump;

  // The reference, in double.
  int h = p.hw, wd = p.hw;
  const std::vector<float> xf = UniformFloats(p.c * p.hw * p.hw, -1.f, 1.f, 5);
  std::vector<double> v(xf.begin(), xf.end());
  if (p.stem) v = ReferenceConv2d(v, p.c, h, wd, stem_w, stem_b, sc, 3, 1, 1, 1, false, &h, &wd);
  int ph = 0, pw = 0;
  const std::vector<double> vp = Pad(v, p.c, h, wd, p.pad, p.value, &ph, &pw);
  int oh = 0, ow = 0;
  const std::vector<double> ref =
      ReferenceConv2d(vp, p.c, ph, pw, w, b, p.oc, p.k, p.stride, p.conv_pad, p.groups, false,
                      &oh, &ow);

  std::vector<float> out(ref.size()), out_pad(vp.size());
  const void* ins[] = {xf.data()};
  void* outs[] = {out.data(), out_pad.data()};
  const absl::Status run =
      Execute(**cg, ins, absl::Span<void* const>(outs, p.pad_is_output ? 2 : 1));
  ASSERT_TRUE(run.ok()) << run;
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref[i]));
  EXPECT_LT(worst, 1e-4) << dump;
  if (p.pad_is_output) {
    for (size_t i = 0; i < vp.size(); ++i) ASSERT_NEAR(out_pad[i], vp[i], 1e-4) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pads, FoldConvPaddingTest,
    ::testing::Values(
        // TF "same" for a stride-2 3x3 depthwise convolution: one more
        // row and column at the end.
        Case{"DepthwiseSameStride2", 32, 14, 32, 3, 2, 0, 32, {0, 1, 0, 1}, 0.0, true, false},
        Case{"DepthwiseSameStride2Plain", 16, 15, 16, 3, 2, 0, 16, {0, 1, 0, 1}, 0.0, false, false},
        // Uneven on every side, added to the convolution's own padding.
        Case{"Dense5x5OnTopOfPadding", 8, 11, 24, 5, 1, 1, 1, {1, 2, 2, 0}, 0.0, true, false},
        // A pad of the last dim only.
        Case{"WidthOnly", 8, 9, 16, 3, 1, 1, 1, {2, 1}, 0.0, true, false},
        Case{"Dense3x3Stride2", 16, 17, 32, 3, 2, 0, 1, {1, 1, 1, 1}, 0.0, true, false},
        // Another fill is not a convolution's padding.
        Case{"NonZeroFillStays", 16, 14, 16, 3, 2, 0, 16, {0, 1, 0, 1}, 0.5, true, false},
        // The padded tensor is read elsewhere: the pad stays for it.
        Case{"PadAlsoAnOutput", 16, 14, 16, 3, 2, 0, 16, {0, 1, 0, 1}, 0.0, true, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln::runtime
