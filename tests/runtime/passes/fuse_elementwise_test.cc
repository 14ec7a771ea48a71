// The elementwise fusion pass, end to end through Compile(): which groups
// become one kiln.elementwise step and which are left alone, and that a
// fused graph computes what the same graph computes unfused. The unfused
// result comes from compiling the graph with every intermediate also
// returned as a graph output, which keeps every op a step of its own.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

kiln::v1::Argument String(const std::string& s) {
  kiln::v1::Argument a;
  a.set_str_value(s);
  return a;
}
void Kwarg(GraphBuilder& b, int node, const std::string& name, const kiln::v1::Argument& value) {
  auto* kw = b.graph().mutable_nodes(node)->mutable_call()->add_kwargs();
  kw->set_name(name);
  *kw->mutable_value() = value;
}

absl::StatusOr<ConstantData> NoConstants(const std::string& hash) {
  return absl::NotFoundError(hash);
}

std::unique_ptr<CompiledGraph> CompileOrDie(const kiln::v1::Graph& g) {
  absl::StatusOr<Graph> ir = GraphFromProto(g);
  EXPECT_TRUE(ir.ok()) << ir.status();
  auto cg = Compile(*std::move(ir), NoConstants);
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

// Runs `cg` on `inputs`; returns every output.
std::vector<std::vector<float>> RunGraph(const CompiledGraph& cg,
                                    const std::vector<std::vector<float>>& inputs) {
  std::vector<const void*> in;
  for (const auto& v : inputs) in.push_back(v.data());
  std::vector<std::vector<float>> outs;
  for (const TensorMeta& m : cg.output_metas) outs.emplace_back(m.NumElements());
  std::vector<void*> out;
  for (auto& v : outs) out.push_back(v.data());
  absl::Status s = Execute(cg, in, out);
  EXPECT_TRUE(s.ok()) << s;
  return outs;
}

// The same graph with every op's output also returned, so nothing fuses.
kiln::v1::Graph Unfused(kiln::v1::Graph g) {
  for (int i = 0; i < g.nodes_size(); ++i) {
    if (!g.nodes(i).has_call()) continue;
    auto* o = g.add_outputs();
    o->set_node(i);
    o->set_output(0);
  }
  return g;
}

int CountTarget(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const CompiledStep& s : cg.steps) n += cg.graph.nodes[s.node].target == target;
  return n;
}

// Fused and unfused results of output 0 agree within `rtol` (NaN = NaN).
void ExpectSameAsUnfused(const kiln::v1::Graph& g, const std::vector<std::vector<float>>& inputs,
                         double rtol = 1e-6) {
  auto fused = CompileOrDie(g);
  auto unfused = CompileOrDie(Unfused(g));
  ASSERT_TRUE(fused && unfused);
  ASSERT_GT(unfused->steps.size(), fused->steps.size()) << DumpCompiledGraph(*unfused);
  ASSERT_EQ(CountTarget(*unfused, "kiln.elementwise"), 0) << DumpCompiledGraph(*unfused);
  const std::vector<float> a = RunGraph(*fused, inputs)[0];
  const std::vector<float> b = RunGraph(*unfused, inputs)[0];
  ASSERT_EQ(a.size(), b.size());
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    // a == b also covers equal infinities.
    const bool ok = std::isnan(b[i])
                        ? std::isnan(a[i])
                        : a[i] == b[i] || std::abs(a[i] - b[i]) <= rtol * std::abs(b[i]);
    if (!ok) {
      ADD_FAILURE() << "element " << i << ": fused " << a[i] << ", unfused " << b[i] << "\n"
                    << DumpCompiledGraph(*fused);
      ++bad;
    }
  }
}

// sigmoid(x * y + 1.5)
kiln::v1::Graph MulAddSigmoid(const std::vector<int64_t>& shape) {
  GraphBuilder b;
  int x = b.Input(shape, "x"), y = b.Input(shape, "y");
  int mul = b.Call("aten.mul.Tensor", {Ref(x), Ref(y)}, "mul");
  int add = b.Call("aten.add.Tensor", {Ref(mul), Float(1.5)}, "add");
  b.Output(b.Call("aten.sigmoid.default", {Ref(add)}, "sigmoid"));
  return b.graph();
}

TEST(FuseElementwise, ChainBecomesOneStep) {
  auto cg = CompileOrDie(MulAddSigmoid({4, 37}));
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->steps.size(), 1u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(cg->graph.nodes[cg->steps[0].node].target, "kiln.elementwise");
  const std::vector<float> x = UniformFloats(148, -3.f, 3.f, 1), y = UniformFloats(148, -3.f, 3.f, 2);
  const std::vector<float> out = RunGraph(*cg, {x, y})[0];
  for (size_t i = 0; i < out.size(); ++i) {
    const double ref = 1.0 / (1.0 + std::exp(-(static_cast<double>(x[i]) * y[i] + 1.5)));
    EXPECT_NEAR(out[i], ref, 1e-6 * ref) << i;
  }
}

TEST(FuseElementwise, DumpShowsTheGroupAsOneLineWithItsProgram) {
  auto cg = CompileOrDie(MulAddSigmoid({2, 3}));
  ASSERT_TRUE(cg);
  const std::string dump = DumpCompiledGraph(*cg);
  EXPECT_NE(dump.find("= kiln.elementwise(in0, in1, ['mul(x0,x1)','add(t0,1.5)','sigmoid(t1)'])"),
            std::string::npos)
      << dump;
  EXPECT_NE(dump.find("# mul+add+sigmoid"), std::string::npos) << dump;
}

TEST(FuseElementwise, ChainMatchesUnfusedAtEveryBlockBoundary) {
  // Sizes around the kernel's 64-element blocks, and a large one that runs
  // on several threads.
  for (int64_t n : {1, 7, 63, 64, 65, 200, 4099, 100003}) {
    SCOPED_TRACE(n);
    ExpectSameAsUnfused(MulAddSigmoid({n}),
                        {UniformFloats(n, -4.f, 4.f, 3), UniformFloats(n, -4.f, 4.f, 4)});
  }
}

TEST(FuseElementwise, TreeWithASharedIntermediateBecomesOneStep) {
  // t = x + y; out = t * sigmoid(t) - tanh(x) / 2
  GraphBuilder b;
  int x = b.Input({5, 19}, "x"), y = b.Input({5, 19}, "y");
  int t = b.Call("aten.add.Tensor", {Ref(x), Ref(y)}, "t");
  int s = b.Call("aten.sigmoid.default", {Ref(t)}, "s");
  int ts = b.Call("aten.mul.Tensor", {Ref(t), Ref(s)}, "ts");
  int th = b.Call("aten.tanh.default", {Ref(x)}, "th");
  int half = b.Call("aten.div.Tensor", {Ref(th), Float(2.0)}, "half");
  b.Output(b.Call("aten.sub.Tensor", {Ref(ts), Ref(half)}, "out"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->steps.size(), 1u) << DumpCompiledGraph(*cg);
  const std::vector<float> xs = UniformFloats(95, -5.f, 5.f, 5), ys = UniformFloats(95, -5.f, 5.f, 6);
  const std::vector<float> out = RunGraph(*cg, {xs, ys})[0];
  for (size_t i = 0; i < out.size(); ++i) {
    const double tv = static_cast<double>(xs[i]) + ys[i];
    const double ref = tv / (1.0 + std::exp(-tv)) - std::tanh(static_cast<double>(xs[i])) / 2;
    EXPECT_NEAR(out[i], ref, 2e-6 * std::max(1.0, std::abs(ref))) << i;
  }
  ExpectSameAsUnfused(b.graph(), {xs, ys});
}

TEST(FuseElementwise, EveryFusibleOpMatchesUnfused) {
  // One long chain through every op the pass knows, with literal and
  // keyword arguments the way the client sends them.
  GraphBuilder b;
  const std::vector<int64_t> shape = {3, 7, 11};
  int x = b.Input(shape, "x"), y = b.Input(shape, "y");
  int v = b.Call("aten.add.Tensor", {Ref(x), Ref(y)}, "add_alpha");
  Kwarg(b, v, "alpha", Float(2.5));
  v = b.Call("aten.sub.Tensor", {Ref(v), kiln::testing::Int(3)}, "sub_scalar");
  Kwarg(b, v, "alpha", Float(0.5));
  v = b.Call("aten.sub.Tensor", {Ref(v), Ref(y)}, "sub");
  v = b.Call("aten.mul.Scalar", {Ref(v), Float(0.25)}, "mul_scalar");
  v = b.Call("aten.gelu.default", {Ref(v)}, "gelu");
  v = b.Call("aten.gelu.default", {Ref(v), String("tanh")}, "gelu_tanh");
  v = b.Call("aten.silu.default", {Ref(v)}, "silu");
  v = b.Call("aten.hardswish.default", {Ref(v)}, "hardswish");
  v = b.Call("aten.mul.Tensor", {Ref(v), Ref(x)}, "mul");
  v = b.Call("aten.hardsigmoid.default", {Ref(v)}, "hardsigmoid");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), kiln::testing::Int(3)}, "cube");
  v = b.Call("aten.add.Tensor", {Ref(v), Float(0.1)}, "eps");
  v = b.Call("aten.rsqrt.default", {Ref(v)}, "rsqrt");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), Float(-2.0)}, "inv_square");
  v = b.Call("aten.sqrt.default", {Ref(v)}, "sqrt");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), Float(0.5)}, "pow_half");
  v = b.Call("aten.neg.default", {Ref(v)}, "neg");
  v = b.Call("aten.clamp.default", {Ref(v), Float(-0.8)}, "clamp_min");
  v = b.Call("aten.clamp.default", {Ref(v), None(), kiln::testing::Int(2)}, "clamp_max");
  v = b.Call("aten.hardtanh.default", {Ref(v)}, "hardtanh");
  v = b.Call("aten.exp.default", {Ref(v)}, "exp");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), Float(-1.0)}, "reciprocal");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), Float(-0.5)}, "pow_rsqrt");
  v = b.Call("aten.pow.Tensor_Scalar", {Ref(v), Float(2.0)}, "square");
  v = b.Call("aten.mul.Tensor", {Ref(v), Ref(y)}, "mul_y");
  v = b.Call("aten.tanh.default", {Ref(v)}, "tanh");
  v = b.Call("aten.div.Tensor", {Ref(v), Ref(x)}, "div");
  v = b.Call("aten.relu.default", {Ref(v)}, "relu");
  v = b.Call("aten.sub.Tensor", {Ref(v), Float(0.5)}, "shift");
  v = b.Call("aten.leaky_relu.default", {Ref(v), Float(0.2)}, "leaky_relu");
  v = b.Call("aten.leaky_relu.default", {Ref(v)}, "leaky_relu_default");
  v = b.Call("aten.sigmoid.default", {Ref(v)}, "sigmoid");
  b.Output(v);
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 1u) << DumpCompiledGraph(*cg);
  const int64_t n = 3 * 7 * 11;
  ExpectSameAsUnfused(b.graph(), {UniformFloats(n, -3.f, 3.f, 7), UniformFloats(n, -3.f, 3.f, 8)});
}

TEST(FuseElementwise, NaNAndInfinitiesMatchUnfused) {
  GraphBuilder b;
  int x = b.Input({16}, "x");
  int g = b.Call("aten.gelu.default", {Ref(x)}, "gelu");
  int c = b.Call("aten.clamp.default", {Ref(g), Float(-1.0), Float(5.0)}, "clamp");
  int s = b.Call("aten.silu.default", {Ref(c)}, "silu");
  b.Output(b.Call("aten.leaky_relu.default", {Ref(s), Float(0.3)}, "leaky_relu"));
  std::vector<float> xs = UniformFloats(16, -9.f, 9.f, 9);
  xs[0] = NAN;
  xs[1] = INFINITY;
  xs[2] = -INFINITY;
  xs[3] = -0.0f;
  ExpectSameAsUnfused(b.graph(), {xs});
}

TEST(FuseElementwise, IntermediateReturnedByTheGraphIsNotFused) {
  GraphBuilder b;
  int x = b.Input({8}, "x"), y = b.Input({8}, "y");
  int mul = b.Call("aten.mul.Tensor", {Ref(x), Ref(y)}, "mul");
  b.Output(b.Call("aten.sigmoid.default", {Ref(mul)}, "sigmoid"));
  b.Output(mul);
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 2u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "kiln.elementwise"), 0) << DumpCompiledGraph(*cg);
}

TEST(FuseElementwise, IntermediateWithAUserOutsideTheGroupIsNotFused) {
  // mul feeds the chain and also a permute: the group is relu(sigmoid(.))
  // without mul, and mul's value still exists for the permute.
  GraphBuilder b;
  int x = b.Input({4, 6}, "x"), y = b.Input({4, 6}, "y");
  int mul = b.Call("aten.mul.Tensor", {Ref(x), Ref(y)}, "mul");
  int s = b.Call("aten.sigmoid.default", {Ref(mul)}, "sigmoid");
  b.Output(b.Call("aten.relu.default", {Ref(s)}, "relu"));
  b.Output(b.Call("aten.permute.default", {Ref(mul), kiln::testing::IntList({1, 0})}, "perm"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 3u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "aten.mul.Tensor"), 1) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "kiln.elementwise"), 1) << DumpCompiledGraph(*cg);
  const std::vector<float> xs = UniformFloats(24, -2.f, 2.f, 10), ys = UniformFloats(24, -2.f, 2.f, 11);
  const auto outs = RunGraph(*cg, {xs, ys});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) {
      const double m = static_cast<double>(xs[i * 6 + j]) * ys[i * 6 + j];
      EXPECT_NEAR(outs[0][i * 6 + j], 1.0 / (1.0 + std::exp(-m)), 1e-6);
      EXPECT_EQ(outs[1][j * 4 + i], xs[i * 6 + j] * ys[i * 6 + j]);
    }
}

TEST(FuseElementwise, BroadcastingTensorOperandIsNotFused) {
  // x + bias[8] broadcasts a non-scalar: the add stays, and relu alone is
  // not worth a fused step.
  GraphBuilder b;
  int x = b.Input({4, 8}, "x"), bias = b.Input({8}, "bias");
  int add = b.Call("aten.add.Tensor", {Ref(x), Ref(bias)}, "add");
  b.Output(b.Call("aten.relu.default", {Ref(add)}, "relu"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 2u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "kiln.elementwise"), 0) << DumpCompiledGraph(*cg);
}

TEST(FuseElementwise, BroadcastingOperandSplitsTheChain) {
  // exp(x) * bias[1,8] then tanh(.) + 1: the broadcasting mul stays and
  // the ops on either side of it form groups of their own only where they
  // have two ops.
  GraphBuilder b;
  int x = b.Input({4, 8}, "x"), bias = b.Input({1, 8}, "bias");
  int e = b.Call("aten.exp.default", {Ref(x)}, "exp");
  int n = b.Call("aten.neg.default", {Ref(e)}, "neg");
  int mul = b.Call("aten.mul.Tensor", {Ref(n), Ref(bias)}, "mul");
  int t = b.Call("aten.tanh.default", {Ref(mul)}, "tanh");
  b.Output(b.Call("aten.add.Tensor", {Ref(t), Float(1.0)}, "add"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 3u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "kiln.elementwise"), 2) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "aten.mul.Tensor"), 1) << DumpCompiledGraph(*cg);
  ExpectSameAsUnfused(b.graph(), {UniformFloats(32, -2.f, 2.f, 12), UniformFloats(8, -2.f, 2.f, 13)});
}

TEST(FuseElementwise, SingleElementTensorBroadcastsAsAScalar) {
  GraphBuilder b;
  int x = b.Input({3, 50}, "x"), s = b.Input({1, 1}, "s");
  int mul = b.Call("aten.mul.Tensor", {Ref(x), Ref(s)}, "mul");
  int add = b.Call("aten.add.Tensor", {Ref(s), Ref(mul)}, "add");
  b.Output(b.Call("aten.exp.default", {Ref(add)}, "exp"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->steps.size(), 1u) << DumpCompiledGraph(*cg);
  const std::vector<float> xs = UniformFloats(150, -2.f, 2.f, 14), ss = {0.75f};
  const std::vector<float> out = RunGraph(*cg, {xs, ss})[0];
  for (size_t i = 0; i < out.size(); ++i) {
    const double ref = std::exp(0.75 + 0.75 * static_cast<double>(xs[i]));
    EXPECT_NEAR(out[i], ref, 2e-6 * ref) << i;
  }
  ExpectSameAsUnfused(b.graph(), {xs, ss});
}

TEST(FuseElementwise, SingleOpIsLeftAlone) {
  GraphBuilder b;
  int x = b.Input({8}, "x");
  b.Output(b.Call("aten.sigmoid.default", {Ref(x)}, "sigmoid"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->steps.size(), 1u);
  EXPECT_EQ(cg->graph.nodes[cg->steps[0].node].target, "aten.sigmoid.default");
}

TEST(FuseElementwise, ActivationAfterAMatmulStaysAPostOp) {
  // relu(mm(a, b)) * 2 + 1: relu goes into kiln.addmm first; the mul and
  // add that follow fuse on their own.
  GraphBuilder b;
  int a = b.Input({4, 5}, "a"), w = b.Input({5, 6}, "w");
  int mm = b.Call("aten.mm.default", {Ref(a), Ref(w)}, "mm");
  int r = b.Call("aten.relu.default", {Ref(mm)}, "relu");
  int mul = b.Call("aten.mul.Tensor", {Ref(r), Float(2.0)}, "mul");
  b.Output(b.Call("aten.add.Tensor", {Ref(mul), Float(1.0)}, "add"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  ASSERT_EQ(cg->steps.size(), 2u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(cg->graph.nodes[cg->steps[0].node].target, "kiln.addmm");
  EXPECT_EQ(cg->graph.nodes[cg->steps[1].node].target, "kiln.elementwise");
}

TEST(FuseElementwise, LongChainsSplitAtTheProgramLimit) {
  // 100 ops in a row: more than one program's worth; still correct.
  GraphBuilder b;
  int v = b.Input({300}, "x");
  for (int i = 0; i < 100; ++i) {
    v = b.Call(i % 2 ? "aten.tanh.default" : "aten.mul.Tensor",
               i % 2 ? std::vector<kiln::v1::Argument>{Ref(v)}
                     : std::vector<kiln::v1::Argument>{Ref(v), Float(1.5)});
  }
  b.Output(v);
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 2u) << DumpCompiledGraph(*cg);
  ExpectSameAsUnfused(b.graph(), {UniformFloats(300, -2.f, 2.f, 15)});
}

TEST(FuseElementwise, WideTreesStayWithinTheKernelLimits) {
  // 24 scaled copies of x, all computed before they are summed: a program
  // holding them all would keep 24 results alive at once.
  GraphBuilder b;
  int x = b.Input({100}, "x");
  std::vector<int> parts;
  for (int i = 0; i < 24; ++i) {
    parts.push_back(b.Call("aten.mul.Tensor", {Ref(x), Float(0.5 + i)}));
  }
  int v = parts[0];
  for (int i = 1; i < 24; ++i) v = b.Call("aten.add.Tensor", {Ref(v), Ref(parts[i])});
  b.Output(b.Call("aten.tanh.default", {Ref(v)}));
  auto cg = CompileOrDie(b.graph());  // each program prepared: within limits
  ASSERT_TRUE(cg);
  EXPECT_LT(cg->steps.size(), 48u) << DumpCompiledGraph(*cg);
  ExpectSameAsUnfused(b.graph(), {UniformFloats(100, -0.1f, 0.1f, 16)});
}

TEST(FuseElementwise, NonF32ValuesAreNotFused) {
  // An i64 add (position ids) next to f32 math: only the f32 ops fuse.
  GraphBuilder b;
  int x = b.Input({6}, "x");
  int neg = b.Call("aten.neg.default", {Ref(x)}, "neg");
  b.Output(b.Call("aten.exp.default", {Ref(neg)}, "exp"));
  auto* ids = b.graph().add_nodes();
  ids->set_name("ids");
  *ids->mutable_placeholder()->mutable_meta() = kiln::testing::F32Meta({6});
  ids->mutable_placeholder()->mutable_meta()->set_dtype(kiln::v1::INT64);
  const int id_node = b.graph().nodes_size() - 1;
  int add = b.Call("aten.add.Tensor", {Ref(id_node), kiln::testing::Int(1)}, "add_ids");
  b.Output(b.Call("aten.add.Tensor", {Ref(add), kiln::testing::Int(2)}, "add_ids2"));
  auto cg = CompileOrDie(b.graph());
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->steps.size(), 3u) << DumpCompiledGraph(*cg);
  EXPECT_EQ(CountTarget(*cg, "kiln.elementwise"), 1) << DumpCompiledGraph(*cg);
}

}  // namespace
}  // namespace kiln::runtime
