// Decomposed activations (activation_patterns.h) after a convolution or a
// matmul fuse into it as one oneDNN post-op, through Compile(), and give
// the same results as a double-precision reference of the ATen graph.
#include <algorithm>
#include <cmath>
#include <functional>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/proto_graph.h"
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
using kiln::testing::UniformFloats;

using Constants = kiln::testing::ConstantTable;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double HardSigmoid(double x) { return std::min(6.0, std::max(0.0, x + 3.0)) / 6.0; }

// Builds the activation's nodes on `x`; returns the result node.
using ActivationBuilder = std::function<int(GraphBuilder&, int x)>;

struct Case {
  const char* name;
  ActivationBuilder build;
  std::function<double(double)> reference;
  const char* post_op;  // expected in the fused node; null: must not fuse
};

const Case kCases[] = {
    {"SiluAsSigmoidTimesInput",
     [](GraphBuilder& b, int x) {
       int s = b.Call("aten.sigmoid.default", {Ref(x)}, "sigmoid");
       return b.Call("aten.mul.Tensor", {Ref(x), Ref(s)}, "mul");
     },
     [](double x) { return x * Sigmoid(x); }, "silu"},
    {"SiluWithOperandsSwapped",
     [](GraphBuilder& b, int x) {
       int s = b.Call("aten.sigmoid.default", {Ref(x)}, "sigmoid");
       return b.Call("aten.mul.Tensor", {Ref(s), Ref(x)}, "mul");
     },
     [](double x) { return x * Sigmoid(x); }, "silu"},
    {"HardswishAsTorchDecomposesIt",
     [](GraphBuilder& b, int x) {
       int a = b.Call("aten.add.Tensor", {Ref(x), Int(3)}, "add");
       int c0 = b.Call("aten.clamp.default", {Ref(a), Int(0)}, "clamp");
       int c1 = b.Call("aten.clamp.default", {Ref(c0), None(), Int(6)}, "clamp_1");
       int m = b.Call("aten.mul.Tensor", {Ref(x), Ref(c1)}, "mul");
       return b.Call("aten.div.Tensor", {Ref(m), Int(6)}, "div");
     },
     [](double x) { return x * HardSigmoid(x); }, "hardswish"},
    {"HardswishAsInputTimesHardsigmoid",
     [](GraphBuilder& b, int x) {
       int a = b.Call("aten.add.Tensor", {Ref(x), Float(3.0)}, "add");
       int c = b.Call("aten.clamp.default", {Ref(a), Int(0), Int(6)}, "clamp");
       int d = b.Call("aten.div.Tensor", {Ref(c), Float(6.0)}, "div");
       return b.Call("aten.mul.Tensor", {Ref(d), Ref(x)}, "mul");
     },
     [](double x) { return x * HardSigmoid(x); }, "hardswish"},
    {"HardsigmoidAsTorchDecomposesIt",
     [](GraphBuilder& b, int x) {
       int a = b.Call("aten.add.Tensor", {Ref(x), Int(3)}, "add");
       int c0 = b.Call("aten.clamp.default", {Ref(a), Int(0)}, "clamp");
       int c1 = b.Call("aten.clamp.default", {Ref(c0), None(), Int(6)}, "clamp_1");
       return b.Call("aten.div.Tensor", {Ref(c1), Int(6)}, "div");
     },
     HardSigmoid, "hardsigmoid"},
    {"HardsigmoidWithHardtanhAndMulBySixth",
     [](GraphBuilder& b, int x) {
       int a = b.Call("aten.add.Tensor", {Ref(x), Int(3)}, "add");
       int c = b.Call("aten.hardtanh.default", {Ref(a), Float(0.0), Float(6.0)}, "hardtanh");
       return b.Call("aten.mul.Tensor", {Ref(c), Float(1.0 / 6.0)}, "mul");
     },
     HardSigmoid, "hardsigmoid"},
    {"ClampToOtherBoundsIsNotHardsigmoid",
     [](GraphBuilder& b, int x) {
       int a = b.Call("aten.add.Tensor", {Ref(x), Int(3)}, "add");
       int c0 = b.Call("aten.clamp.default", {Ref(a), Int(0)}, "clamp");
       int c1 = b.Call("aten.clamp.default", {Ref(c0), None(), Int(5)}, "clamp_1");
       return b.Call("aten.div.Tensor", {Ref(c1), Int(6)}, "div");
     },
     [](double x) { return std::min(5.0, std::max(0.0, x + 3.0)) / 6.0; }, nullptr},
    {"MulByAnotherTensorIsNotSilu",
     [](GraphBuilder& b, int x) {
       int s = b.Call("aten.sigmoid.default", {Ref(x)}, "sigmoid");
       int t = b.Call("aten.sigmoid.default", {Ref(s)}, "sigmoid_1");
       return b.Call("aten.mul.Tensor", {Ref(x), Ref(t)}, "mul");
     },
     [](double x) { return x * Sigmoid(Sigmoid(x)); }, nullptr},
};

class ConvActivation : public ::testing::TestWithParam<Case> {};

// conv1x1(x) + bias -> activation, NCHW [1, C, H, W] -> [1, O, H, W].
TEST_P(ConvActivation, FusesIntoTheConvolutionWhenItIsOne) {
  const Case& c = GetParam();
  constexpr int C = 8, O = 16, H = 5, W = 7;
  std::vector<float> w = UniformFloats(O * C, -0.5f, 0.5f, 1), bias = UniformFloats(O, -1.f, 1.f, 2);
  Constants consts;
  consts.Add(w);
  consts.Add(bias);
  GraphBuilder b;
  int x = b.Input({1, C, H, W}, "x");
  int cw = b.Constant(w, {O, C, 1, 1}, "w");
  int cb = b.Constant(bias, {O}, "b");
  int conv = b.Call("aten.convolution.default",
                    {Ref(x), Ref(cw), Ref(cb), IntList({1, 1}), IntList({0, 0}), IntList({1, 1}),
                     Bool(false), IntList({0, 0}), Int(1)},
                    "conv");
  b.Output(c.build(b, conv));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  if (c.post_op != nullptr) {
    ASSERT_EQ((*cg)->steps.size(), 1u) << dump;
    const Node& fused = (*cg)->graph.nodes[(*cg)->steps[0].node];
    ASSERT_EQ(fused.target, "kiln.conv2d") << dump;
    ASSERT_EQ(fused.args[8].list.size(), 1u) << dump;
    EXPECT_EQ(fused.args[8].list[0].s, c.post_op) << dump;
  } else {
    EXPECT_GT((*cg)->steps.size(), 1u) << dump;
  }
  std::vector<float> in = UniformFloats(C * H * W, -2.f, 2.f, 3), out(O * H * W);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int o = 0; o < O; ++o)
    for (int p = 0; p < H * W; ++p) {
      double acc = bias[o];
      for (int i = 0; i < C; ++i) acc += static_cast<double>(w[o * C + i]) * in[i * H * W + p];
      EXPECT_NEAR(out[o * H * W + p], c.reference(acc), 1e-5) << o << "," << p;
    }
}

INSTANTIATE_TEST_SUITE_P(Patterns, ConvActivation, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

TEST(ConvActivationUses, ConvOutputReadElsewhereIsNotFused) {
  constexpr int C = 4, H = 3, W = 3;
  std::vector<float> w = UniformFloats(C * C, -0.5f, 0.5f, 4);
  Constants consts;
  consts.Add(w);
  GraphBuilder b;
  int x = b.Input({1, C, H, W}, "x");
  int cw = b.Constant(w, {C, C, 1, 1}, "w");
  int conv = b.Call("aten.convolution.default",
                    {Ref(x), Ref(cw), None(), IntList({1, 1}), IntList({0, 0}), IntList({1, 1}),
                     Bool(false), IntList({0, 0}), Int(1)},
                    "conv");
  int s = b.Call("aten.sigmoid.default", {Ref(conv)}, "sigmoid");
  b.Output(b.Call("aten.mul.Tensor", {Ref(conv), Ref(s)}, "mul"));
  b.Output(conv);  // the raw convolution is needed too
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  ASSERT_EQ((*cg)->steps.size(), 2u) << dump;
  EXPECT_TRUE((*cg)->graph.nodes[(*cg)->steps[0].node].args[8].list.empty()) << dump;
  std::vector<float> in = UniformFloats(C * H * W, -2.f, 2.f, 5), silu(C * H * W), raw(C * H * W);
  const void* ins[] = {in.data()};
  void* outs[] = {silu.data(), raw.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int o = 0; o < C; ++o)
    for (int p = 0; p < H * W; ++p) {
      double acc = 0;
      for (int i = 0; i < C; ++i) acc += static_cast<double>(w[o * C + i]) * in[i * H * W + p];
      EXPECT_NEAR(raw[o * H * W + p], acc, 1e-5);
      EXPECT_NEAR(silu[o * H * W + p], acc * Sigmoid(acc), 1e-5);
    }
}

TEST(MatmulActivation, DecomposedHardswishFusesIntoTheMatmul) {
  constexpr int M = 3, K = 5, N = 4;
  std::vector<float> w = UniformFloats(K * N, -1.f, 1.f, 6), bias = UniformFloats(N, -1.f, 1.f, 7);
  Constants consts;
  consts.Add(w);
  consts.Add(bias);
  GraphBuilder b;
  int x = b.Input({M, K});
  int cw = b.Constant(w, {K, N}, "w");
  int cb = b.Constant(bias, {N}, "b");
  int mm = b.Call("aten.addmm.default", {Ref(cb), Ref(x), Ref(cw)}, "addmm");
  int a = b.Call("aten.add.Tensor", {Ref(mm), Int(3)}, "add");
  int c0 = b.Call("aten.clamp.default", {Ref(a), Int(0)}, "clamp");
  int c1 = b.Call("aten.clamp.default", {Ref(c0), None(), Int(6)}, "clamp_1");
  int m = b.Call("aten.mul.Tensor", {Ref(mm), Ref(c1)}, "mul");
  b.Output(b.Call("aten.div.Tensor", {Ref(m), Int(6)}, "div"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.addmm");
  std::vector<float> in = UniformFloats(M * K, -2.f, 2.f, 8), out(M * N);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = bias[j];
      for (int k = 0; k < K; ++k) acc += static_cast<double>(in[i * K + k]) * w[k * N + j];
      EXPECT_NEAR(out[i * N + j], acc * HardSigmoid(acc), 1e-5);
    }
}

}  // namespace
}  // namespace kiln::runtime
