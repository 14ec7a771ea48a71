// FuseConvDepthwise through Compile(): an inverted-residual block's expand
// 1x1 convolution and 3x3 depthwise convolution become one kiln.conv2d_dw
// step where that pays, with results equal to a double-precision
// reference of the ATen graph, and stay apart where it does not.
#include <algorithm>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/reference_conv.h"
#include "tests/testing/constant_table.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::None;
using kiln::testing::Ref;
using kiln::runtime::testing::ReferenceConv2d;
using kiln::testing::UniformFloats;

using Constants = kiln::testing::ConstantTable;

// stem 3x3 (3 -> C) -> expand 1x1 (C -> M) + relu6 -> depthwise 3x3
// stride 2 + relu6 -> project 1x1 (M -> 8): the stem makes the block's
// input channels-last, as inside a network.
class InvertedResidual : public ::testing::Test {
 protected:
  static constexpr int C = 16, M = 96, P = 8;
  void SetUp() override {
    stem_w = UniformFloats(C * 3 * 9, -0.5f, 0.5f, 1);
    stem_b = UniformFloats(C, -0.5f, 0.5f, 2);
    exp_w = UniformFloats(M * C, -0.3f, 0.3f, 3);
    exp_b = UniformFloats(M, -0.5f, 0.5f, 4);
    dw_w = UniformFloats(M * 9, -0.5f, 0.5f, 5);
    dw_b = UniformFloats(M, -0.5f, 0.5f, 6);
    proj_w = UniformFloats(P * M, -0.2f, 0.2f, 7);
    proj_b = UniformFloats(P, -0.5f, 0.5f, 8);
    for (const auto* v : {&stem_w, &stem_b, &exp_w, &exp_b, &dw_w, &dw_b, &proj_w, &proj_b}) {
      consts.Add(*v);
    }
  }
  int ConvNode(GraphBuilder& b, int x, const std::vector<float>& w, const std::vector<float>& bias,
               std::vector<int64_t> wshape, int stride, int pad, int groups, const char* name) {
    int cw = b.Constant(w, wshape), cb = b.Constant(bias, {wshape[0]});
    return b.Call("aten.convolution.default",
                  {Ref(x), Ref(cw), Ref(cb), IntList({stride, stride}), IntList({pad, pad}),
                   IntList({1, 1}), Bool(false), IntList({0, 0}), Int(groups)},
                  name);
  }
  int Relu6(GraphBuilder& b, int x, const char* name) {
    return b.Call("aten.hardtanh.default", {Ref(x), Float(0.0), Float(6.0)}, name);
  }
  // `expand_out`: the expanded tensor is a graph output too.
  kiln::v1::Graph Build(int hw, bool expand_out) {
    GraphBuilder b;
    int x = b.Input({1, 3, hw, hw}, "x");
    int stem = ConvNode(b, x, stem_w, stem_b, {C, 3, 3, 3}, 1, 1, 1, "stem");
    int e = Relu6(b, ConvNode(b, stem, exp_w, exp_b, {M, C, 1, 1}, 1, 0, 1, "expand"), "relu6_e");
    int d = Relu6(b, ConvNode(b, e, dw_w, dw_b, {M, 1, 3, 3}, 2, 1, M, "dw"), "relu6_d");
    b.Output(ConvNode(b, d, proj_w, proj_b, {P, M, 1, 1}, 1, 0, 1, "project"));
    if (expand_out) b.Output(e);
    return b.graph();
  }
  std::vector<double> Reference(const std::vector<float>& x, int hw) {
    int h = hw, w = hw;
    std::vector<double> v(x.begin(), x.end());
    v = ReferenceConv2d(v, 3, h, w, stem_w, stem_b, C, 3, 1, 1, 1, false, &h, &w);
    v = ReferenceConv2d(v, C, h, w, exp_w, exp_b, M, 1, 1, 0, 1, true, &h, &w);
    v = ReferenceConv2d(v, M, h, w, dw_w, dw_b, M, 3, 2, 1, M, true, &h, &w);
    return ReferenceConv2d(v, M, h, w, proj_w, proj_b, P, 1, 1, 0, 1, false, &h, &w);
  }
  int CountSteps(const CompiledGraph& cg, const std::string& target) {
    int n = 0;
    for (const auto& step : cg.steps) n += cg.graph.nodes[step.node].target == target;
    return n;
  }
  std::vector<float> stem_w, stem_b, exp_w, exp_b, dw_w, dw_b, proj_w, proj_b;
  Constants consts;
};

TEST_F(InvertedResidual, ExpandAndDepthwiseFuseWhenTheExpandedTensorIsLarge) {
  constexpr int HW = 112;  // 112 * 112 * 96 floats in between: 4.8 MB
  auto cg = Compile(*GraphFromProto(Build(HW, false)), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  EXPECT_EQ(CountSteps(**cg, "kiln.conv2d_dw"), 1) << dump;
  EXPECT_EQ(CountSteps(**cg, "kiln.conv2d"), 2) << dump;  // stem, project
  std::vector<float> x = UniformFloats(3 * HW * HW, -1.f, 1.f, 9), y(P * (HW / 2) * (HW / 2));
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  std::vector<double> ref = Reference(x, HW);
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref[i]));
  EXPECT_LT(worst, 1e-4);
}

TEST_F(InvertedResidual, SmallBlocksStayTwoConvolutions) {
  auto cg = Compile(*GraphFromProto(Build(14, false)), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(CountSteps(**cg, "kiln.conv2d_dw"), 0) << DumpCompiledGraph(**cg);
}

TEST_F(InvertedResidual, ExpandedTensorReadElsewhereIsNotFused) {
  auto cg = Compile(*GraphFromProto(Build(112, true)), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(CountSteps(**cg, "kiln.conv2d_dw"), 0) << DumpCompiledGraph(**cg);
}

}  // namespace
}  // namespace kiln::runtime
