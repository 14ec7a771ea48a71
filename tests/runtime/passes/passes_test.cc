// Compile passes, end to end through Compile(): batch-norm folding,
// post-op fusion, constant folding and view aliasing each change the
// compiled steps as intended and leave results equal to a double-precision
// reference computed here.
#include <algorithm>
#include <cmath>
#include <string>

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
using kiln::testing::None;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

using Constants = kiln::testing::ConstantTable;

// Direct NCHW convolution, stride 1, padding 1, 3x3, in double.
std::vector<double> Conv3x3(const std::vector<float>& x, const std::vector<float>& w, int c, int oc,
                            int h, int wd) {
  std::vector<double> out(static_cast<size_t>(oc) * h * wd, 0.0);
  for (int o = 0; o < oc; ++o)
    for (int y = 0; y < h; ++y)
      for (int xx = 0; xx < wd; ++xx) {
        double acc = 0;
        for (int i = 0; i < c; ++i)
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              int iy = y + ky - 1, ix = xx + kx - 1;
              if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
              acc += static_cast<double>(x[(i * h + iy) * wd + ix]) * w[((o * c + i) * 3 + ky) * 3 + kx];
            }
        out[(o * h + y) * wd + xx] = acc;
      }
  return out;
}

class ResidualBlock : public ::testing::Test {
 protected:
  static constexpr int C = 8, H = 6, W = 5;
  void SetUp() override {
    w = UniformFloats(C * C * 9, -0.3f, 0.3f, 1);
    gamma = UniformFloats(C, 0.5f, 1.5f, 2);
    beta = UniformFloats(C, -0.5f, 0.5f, 3);
    mean = UniformFloats(C, -0.2f, 0.2f, 4);
    var = UniformFloats(C, 0.5f, 2.f, 5);
    for (const auto* v : {&w, &gamma, &beta, &mean, &var}) consts.Add(*v);
  }
  // relu(bn(conv(x)) + x), the resnet basic-block tail.
  kiln::v1::Graph Build() {
    GraphBuilder b;
    int x = b.Input({1, C, H, W}, "x");
    int cw = b.Constant(w, {C, C, 3, 3}, "w");
    int g = b.Constant(gamma, {C}), bt = b.Constant(beta, {C});
    int m = b.Constant(mean, {C}), v = b.Constant(var, {C});
    int conv = b.Call("aten.convolution.default",
                      {Ref(x), Ref(cw), None(), IntList({1, 1}), IntList({1, 1}), IntList({1, 1}),
                       Bool(false), IntList({0, 0}), kiln::testing::Int(1)},
                      "conv");
    int bn = b.Call("aten._native_batch_norm_legit_no_training.default",
                    {Ref(conv), Ref(g), Ref(bt), Ref(m), Ref(v), Float(0.1), Float(1e-5)}, "bn");
    int add = b.Call("aten.add.Tensor", {Ref(bn, 0), Ref(x)}, "add");
    b.Output(b.Call("aten.relu.default", {Ref(add)}, "relu"));
    return b.graph();
  }
  std::vector<double> Reference(const std::vector<float>& x) {
    std::vector<double> y = Conv3x3(x, w, C, C, H, W);
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < H * W; ++i) {
        double& v = y[c * H * W + i];
        v = (v - mean[c]) / std::sqrt(static_cast<double>(var[c]) + 1e-5) * gamma[c] + beta[c];
        v = std::max(0.0, v + x[c * H * W + i]);
      }
    return y;
  }
  std::vector<float> w, gamma, beta, mean, var;
  Constants consts;
};

TEST_F(ResidualBlock, FoldsBatchNormAndFusesAddReluIntoOneStep) {
  auto cg = Compile(*GraphFromProto(Build()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.conv2d");
  std::vector<float> x = UniformFloats(C * H * W, -1.f, 1.f, 9), y(C * H * W);
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  std::vector<double> ref = Reference(x);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4) << i;
}

TEST_F(ResidualBlock, ConvOutputWithTwoUsersIsNotFused) {
  kiln::v1::Graph g = Build();
  // Also return the batch norm's output: the conv result must survive.
  auto* o = g.add_outputs();
  o->set_node(7);
  o->set_output(0);
  auto cg = Compile(*GraphFromProto(g), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  // The convolution stays alone; add + relu still fuse, into one
  // elementwise step of their own.
  ASSERT_EQ((*cg)->steps.size(), 2u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.conv2d");
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[1].node].target, "kiln.elementwise");
  std::vector<float> x = UniformFloats(C * H * W, -1.f, 1.f, 10), y(C * H * W), bn(C * H * W);
  const void* in[] = {x.data()};
  void* out[] = {y.data(), bn.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  std::vector<double> ref = Reference(x);
  for (size_t i = 0; i < y.size(); ++i) {
    EXPECT_NEAR(y[i], ref[i], 1e-4);
    EXPECT_NEAR(std::max(0.f, bn[i] + x[i]), ref[i], 1e-4);
  }
}

// leaky_relu(conv(x), 0.1): the activation becomes the convolution's
// post-op (oneDNN's relu with a negative slope), one step, same answer.
TEST(PostOpFusion, LeakyReluAfterAConvolutionBecomesItsPostOp) {
  constexpr int C = 4, OC = 8, H = 5, W = 6;
  const std::vector<float> w = UniformFloats(OC * C * 9, -0.4f, 0.4f, 11);
  Constants consts;
  consts.Add(w);
  GraphBuilder b;
  int x = b.Input({1, C, H, W}, "x");
  int cw = b.Constant(w, {OC, C, 3, 3}, "w");
  int conv = b.Call("aten.convolution.default",
                    {Ref(x), Ref(cw), None(), IntList({1, 1}), IntList({1, 1}), IntList({1, 1}),
                     Bool(false), IntList({0, 0}), kiln::testing::Int(1)},
                    "conv");
  b.Output(b.Call("aten.leaky_relu.default", {Ref(conv), Float(0.1)}, "leaky"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.conv2d");
  EXPECT_NE(DumpCompiledGraph(**cg).find("leaky_relu:0.1"), std::string::npos)
      << DumpCompiledGraph(**cg);
  std::vector<float> in_x = UniformFloats(C * H * W, -1.f, 1.f, 12), y(OC * H * W);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  std::vector<double> ref = Conv3x3(in_x, w, C, OC, H, W);
  for (size_t i = 0; i < y.size(); ++i) {
    const double want = ref[i] > 0 ? ref[i] : 0.1 * ref[i];
    EXPECT_NEAR(y[i], want, 1e-4) << i;
  }
}

// ConvMixer's block: bn(gelu(depthwise(x))) + x, then bn(gelu(conv1x1)).
// Each batch norm follows an activation, so it cannot fold into the
// weights; it becomes its convolution's channel_affine post-op (with the
// residual add after it): two convolution steps, no batch norm of their
// own.
TEST(PostOpFusion, BatchNormAfterAnActivationBecomesAChannelAffine) {
  constexpr int C = 16, H = 6, W = 7;
  const std::vector<float> dw = UniformFloats(C * 9, -0.4f, 0.4f, 41);
  const std::vector<float> dwb = UniformFloats(C, -0.2f, 0.2f, 42);
  const std::vector<float> pw = UniformFloats(C * C, -0.3f, 0.3f, 43);
  std::vector<std::vector<float>> bn[2];
  Constants consts;
  consts.Add(dw);
  consts.Add(dwb);
  consts.Add(pw);
  for (int i = 0; i < 2; ++i) {
    bn[i] = {UniformFloats(C, 0.5f, 1.5f, 50 + i), UniformFloats(C, -0.5f, 0.5f, 52 + i),
             UniformFloats(C, -0.2f, 0.2f, 54 + i), UniformFloats(C, 0.5f, 2.f, 56 + i)};
    for (const auto& v : bn[i]) consts.Add(v);
  }
  GraphBuilder b;
  const int x = b.Input({1, C, H, W}, "x");
  auto batch_norm = [&](int input, int i, const char* name) {
    int p[4];
    for (int k = 0; k < 4; ++k) p[k] = b.Constant(bn[i][k], {C});
    return b.Call("aten._native_batch_norm_legit_no_training.default",
                  {Ref(input), Ref(p[0]), Ref(p[1]), Ref(p[2]), Ref(p[3]), Float(0.1), Float(1e-5)},
                  name);
  };
  const int dconv = b.Call("aten.convolution.default",
                           {Ref(x), Ref(b.Constant(dw, {C, 1, 3, 3})), Ref(b.Constant(dwb, {C})),
                            IntList({1, 1}), IntList({1, 1}), IntList({1, 1}), Bool(false),
                            IntList({0, 0}), kiln::testing::Int(C)},
                           "dw");
  const int g1 = b.Call("aten.gelu.default", {Ref(dconv)}, "gelu1");
  const int bn1 = batch_norm(g1, 0, "bn1");
  const int add = b.Call("aten.add.Tensor", {Ref(bn1, 0), Ref(x)}, "add");
  const int pconv = b.Call("aten.convolution.default",
                           {Ref(add), Ref(b.Constant(pw, {C, C, 1, 1})), None(), IntList({1, 1}),
                            IntList({0, 0}), IntList({1, 1}), Bool(false), IntList({0, 0}),
                            kiln::testing::Int(1)},
                           "pw");
  const int g2 = b.Call("aten.gelu.default", {Ref(pconv)}, "gelu2");
  b.Output(batch_norm(g2, 1, "bn2"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  // Besides the two convolutions, at most the residual's move into the
  // layout they compute in.
  int convs = 0;
  for (const auto& step : (*cg)->steps) {
    const std::string& target = (*cg)->graph.nodes[step.node].target;
    convs += target == "kiln.conv2d";
    EXPECT_TRUE(target == "kiln.conv2d" || target == "aten.permute.default") << dump;
  }
  EXPECT_EQ(convs, 2) << dump;
  EXPECT_EQ(dump.find("batch_norm"), std::string::npos) << dump;

  std::vector<float> in_x = UniformFloats(C * H * W, -1.f, 1.f, 60), y(C * H * W);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  auto norm = [&](double v, int i, int c) {
    return (v - bn[i][2][c]) / std::sqrt(static_cast<double>(bn[i][3][c]) + 1e-5) * bn[i][0][c] +
           bn[i][1][c];
  };
  std::vector<double> mid(C * H * W);
  for (int c = 0; c < C; ++c)
    for (int yy = 0; yy < H; ++yy)
      for (int xx = 0; xx < W; ++xx) {
        double acc = dwb[c];
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 3; ++kx) {
            const int iy = yy + ky - 1, ix = xx + kx - 1;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            acc += static_cast<double>(in_x[(c * H + iy) * W + ix]) * dw[(c * 3 + ky) * 3 + kx];
          }
        const int at = (c * H + yy) * W + xx;
        mid[at] = norm(gelu(acc), 0, c) + in_x[at];
      }
  for (int o = 0; o < C; ++o)
    for (int p = 0; p < H * W; ++p) {
      double acc = 0;
      for (int c = 0; c < C; ++c) acc += mid[c * H * W + p] * pw[o * C + c];
      EXPECT_NEAR(y[o * H * W + p], norm(gelu(acc), 1, o), 1e-4) << o << " " << p;
    }
}

// MixNet's mixed-kernel block: the channels split in two, a 3x3 and a 5x5
// depthwise convolution on the halves, joined, then one batch norm. The
// batch norm folds into both convolutions, each with its half of the
// parameters: no batch norm step is left, and the answer is the same.
TEST(BatchNormFolding, FoldsThroughAChannelConcatenationOfConvolutions) {
  constexpr int C = 16, H = 7, W = 6, Half = C / 2;
  const std::vector<float> w3 = UniformFloats(Half * 9, -0.4f, 0.4f, 71);
  const std::vector<float> w5 = UniformFloats(Half * 25, -0.3f, 0.3f, 72);
  const std::vector<float> gamma = UniformFloats(C, 0.5f, 1.5f, 73);
  const std::vector<float> beta = UniformFloats(C, -0.5f, 0.5f, 74);
  const std::vector<float> mean = UniformFloats(C, -0.2f, 0.2f, 75);
  const std::vector<float> var = UniformFloats(C, 0.5f, 2.f, 76);
  Constants consts;
  for (const auto* v : {&w3, &w5, &gamma, &beta, &mean, &var}) consts.Add(*v);
  GraphBuilder b;
  const int x = b.Input({1, C, H, W}, "x");
  const int split = b.Call("aten.split_with_sizes.default",
                           {Ref(x), IntList({Half, Half}), kiln::testing::Int(1)}, "split");
  auto dw = [&](int part, const std::vector<float>& w, int k, const char* name) {
    return b.Call("aten.convolution.default",
                  {Ref(split, part), Ref(b.Constant(w, {Half, 1, k, k})), None(),
                   IntList({1, 1}), IntList({k / 2, k / 2}), IntList({1, 1}), Bool(false),
                   IntList({0, 0}), kiln::testing::Int(Half)},
                  name);
  };
  const int c3 = dw(0, w3, 3, "dw3"), c5 = dw(1, w5, 5, "dw5");
  kiln::v1::Argument parts;
  *parts.mutable_list()->add_items() = Ref(c3);
  *parts.mutable_list()->add_items() = Ref(c5);
  const int cat = b.Call("aten.cat.default", {parts, kiln::testing::Int(1)}, "cat");
  const int bn = b.Call("aten._native_batch_norm_legit_no_training.default",
                        {Ref(cat), Ref(b.Constant(gamma, {C})), Ref(b.Constant(beta, {C})),
                         Ref(b.Constant(mean, {C})), Ref(b.Constant(var, {C})), Float(0.1),
                         Float(1e-5)},
                        "bn");
  b.Output(b.Call("aten.relu.default", {Ref(bn, 0)}, "relu"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  EXPECT_EQ(dump.find("batch_norm"), std::string::npos) << dump;

  std::vector<float> in_x = UniformFloats(C * H * W, -1.f, 1.f, 77), y(C * H * W);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  for (int c = 0; c < C; ++c) {
    const int k = c < Half ? 3 : 5;
    const std::vector<float>& w = c < Half ? w3 : w5;
    const int wc = c % Half;
    for (int yy = 0; yy < H; ++yy)
      for (int xx = 0; xx < W; ++xx) {
        double acc = 0;
        for (int ky = 0; ky < k; ++ky)
          for (int kx = 0; kx < k; ++kx) {
            const int iy = yy + ky - k / 2, ix = xx + kx - k / 2;
            if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
            acc += static_cast<double>(in_x[(c * H + iy) * W + ix]) * w[(wc * k + ky) * k + kx];
          }
        const double v = (acc - mean[c]) / std::sqrt(static_cast<double>(var[c]) + 1e-5) *
                             gamma[c] + beta[c];
        EXPECT_NEAR(y[(c * H + yy) * W + xx], std::max(0.0, v), 1e-4) << c;
      }
  }
}

// silu(cat(conv_a(x), conv_b(x))), silu decomposed as torch writes it
// (sigmoid, then mul): each convolution applies the silu itself, and the
// concatenation joins the results: no sigmoid or mul step is left.
TEST(PostOpFusion, ActivationAfterAConcatenationMovesIntoItsConvolutions) {
  constexpr int C = 4, OC = 6, H = 5, W = 5;
  const std::vector<float> wa = UniformFloats(OC * C * 9, -0.4f, 0.4f, 81);
  const std::vector<float> wb = UniformFloats(OC * C * 9, -0.4f, 0.4f, 82);
  Constants consts;
  consts.Add(wa);
  consts.Add(wb);
  GraphBuilder b;
  const int x = b.Input({1, C, H, W}, "x");
  auto conv = [&](const std::vector<float>& w, const char* name) {
    return b.Call("aten.convolution.default",
                  {Ref(x), Ref(b.Constant(w, {OC, C, 3, 3})), None(), IntList({1, 1}),
                   IntList({1, 1}), IntList({1, 1}), Bool(false), IntList({0, 0}),
                   kiln::testing::Int(1)},
                  name);
  };
  kiln::v1::Argument parts;
  *parts.mutable_list()->add_items() = Ref(conv(wa, "a"));
  *parts.mutable_list()->add_items() = Ref(conv(wb, "b"));
  const int cat = b.Call("aten.cat.default", {parts, kiln::testing::Int(1)}, "cat");
  const int sig = b.Call("aten.sigmoid.default", {Ref(cat)}, "sigmoid");
  b.Output(b.Call("aten.mul.Tensor", {Ref(cat), Ref(sig)}, "mul"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  for (const auto& step : (*cg)->steps) {
    const std::string& target = (*cg)->graph.nodes[step.node].target;
    EXPECT_TRUE(target == "kiln.conv2d" || target == "aten.cat.default" ||
                target == "aten.permute.default")
        << dump;
  }
  EXPECT_NE(dump.find("['silu']"), std::string::npos) << dump;

  std::vector<float> in_x = UniformFloats(C * H * W, -1.f, 1.f, 83), y(2 * OC * H * W);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  const std::vector<double> ra = Conv3x3(in_x, wa, C, OC, H, W), rb = Conv3x3(in_x, wb, C, OC, H, W);
  for (int i = 0; i < 2 * OC * H * W; ++i) {
    const double v = i < OC * H * W ? ra[i] : rb[i - OC * H * W];
    EXPECT_NEAR(y[i], v / (1 + std::exp(-v)), 1e-4) << i;
  }
}

// kiln.conv2d is 1-D and 2-D: a 3-D convolution keeps its own node (and
// the activation its own step), and still computes the right thing.
TEST(PostOpFusion, ThreeDimensionalConvolutionIsNotFused) {
  constexpr int C = 2, OC = 3, D = 3, H = 4, W = 4;
  const std::vector<float> w = UniformFloats(OC * C, -0.5f, 0.5f, 21);  // 1x1x1 kernel
  Constants consts;
  consts.Add(w);
  GraphBuilder b;
  int x = b.Input({1, C, D, H, W}, "x");
  int cw = b.Constant(w, {OC, C, 1, 1, 1}, "w");
  int conv = b.Call("aten.convolution.default",
                    {Ref(x), Ref(cw), None(), IntList({1, 1, 1}), IntList({0, 0, 0}),
                     IntList({1, 1, 1}), Bool(false), IntList({0, 0, 0}), kiln::testing::Int(1)},
                    "conv");
  b.Output(b.Call("aten.relu.default", {Ref(conv)}, "relu"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::string dump = DumpCompiledGraph(**cg);
  EXPECT_EQ(dump.find("kiln.conv2d"), std::string::npos) << dump;
  std::vector<float> in_x = UniformFloats(C * D * H * W, -1.f, 1.f, 22), y(OC * D * H * W);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(**cg, in, out).ok());
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < D * H * W; ++i) {
      double sum = 0;
      for (int c = 0; c < C; ++c) {
        sum += static_cast<double>(w[o * C + c]) * in_x[c * D * H * W + i];
      }
      EXPECT_NEAR(y[o * D * H * W + i], std::max(sum, 0.0), 1e-5) << o << " " << i;
    }
  }
}

TEST(ConstantFolding, PermuteOfAConstantBecomesAConstant) {
  GraphBuilder b;
  std::vector<float> w = UniformFloats(6, -1.f, 1.f, 3);
  Constants consts;
  consts.Add(w);
  int x = b.Input({3, 2});
  int cw = b.Constant(w, {2, 3}, "w");
  int t = b.Call("aten.permute.default", {Ref(cw), IntList({1, 0})}, "t");
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(t)}, "add"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  std::vector<float> in = UniformFloats(6, -1.f, 1.f, 4), out(6);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(out[i * 2 + j], in[i * 2 + j] + w[j * 3 + i]);
}

TEST(MatmulFusion, ActivationAfterAViewMovesIntoTheMatmul) {
  GraphBuilder b;
  std::vector<float> w = UniformFloats(12, -1.f, 1.f, 6), bias = UniformFloats(4, -1.f, 1.f, 7);
  Constants consts;
  consts.Add(w);
  consts.Add(bias);
  int x = b.Input({2, 3});
  int cw = b.Constant(w, {3, 4}, "w");
  int cb = b.Constant(bias, {4}, "b");
  int mm = b.Call("aten.addmm.default", {Ref(cb), Ref(x), Ref(cw)}, "addmm");
  int v = b.Call("aten.view.default", {Ref(mm), IntList({2, 2, 2})}, "view");
  b.Output(b.Call("aten.relu.default", {Ref(v)}, "relu"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.addmm");
  EXPECT_EQ((*cg)->output_metas[0].shape, (std::vector<int64_t>{2, 2, 2}));
  std::vector<float> in = UniformFloats(6, -1.f, 1.f, 8), out(8);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      double acc = bias[j];
      for (int k = 0; k < 3; ++k) acc += static_cast<double>(in[i * 3 + k]) * w[k * 4 + j];
      EXPECT_NEAR(out[i * 4 + j], std::max(0.0, acc), 1e-5);
    }
}

TEST(Aliasing, ViewsRunNoKernelAndShareTheirSourceBytes) {
  GraphBuilder b;
  int x = b.Input({4, 6});
  int r = b.Call("aten.relu.default", {Ref(x)}, "relu");
  int v = b.Call("aten.view.default", {Ref(r), IntList({24})}, "view");
  int v2 = b.Call("aten.view.default", {Ref(v), IntList({2, 12})}, "view2");
  b.Output(b.Call("aten.add.Tensor", {Ref(v2), Ref(v2)}, "add"));
  b.Output(v);
  Constants none;
  auto cg = Compile(*GraphFromProto(b.graph()), none.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ((*cg)->steps.size(), 2u) << DumpCompiledGraph(**cg);
  std::vector<float> in = UniformFloats(24, -1.f, 1.f, 5), sum(24), flat(24);
  const void* ins[] = {in.data()};
  void* outs[] = {sum.data(), flat.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(flat[i], std::max(0.f, in[i]));
    EXPECT_EQ(sum[i], 2 * std::max(0.f, in[i]));
  }
}

TEST(InternalOps, ClientGraphsCannotNameThem) {
  GraphBuilder b;
  int x = b.Input({1, 1, 3, 3});
  b.Output(b.Call("kiln.conv2d", {Ref(x)}, "sneaky"));
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime
