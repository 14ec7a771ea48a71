// AbsorbWeightTranspose through Compile(): a matrix product of a transposed
// constant (ATen's spelling of linear) reads the constant as it is, with
// no transposed copy folded or computed per run, and gives the product.
#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::ConstantTable;
using kiln::testing::GraphBuilder;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

constexpr int kM = 3, kK = 40, kN = 24;

// x [M, K] @ w[N, K]^T (+ bias), in double.
std::vector<double> Linear(const std::vector<float>& x, const std::vector<float>& w,
                           const std::vector<float>* bias) {
  std::vector<double> out(kM * kN);
  for (int i = 0; i < kM; ++i)
    for (int j = 0; j < kN; ++j) {
      double acc = bias != nullptr ? (*bias)[j] : 0.0;
      for (int k = 0; k < kK; ++k) acc += static_cast<double>(x[i * kK + k]) * w[j * kK + k];
      out[i * kN + j] = acc;
    }
  return out;
}

// Constant nodes the compiled graph holds with the transposed shape [K, N].
int TransposedCopies(const CompiledGraph& cg) {
  int n = 0;
  for (const Node& node : cg.graph.nodes) {
    if (!node.dead && node.kind == Node::Kind::kConstant && !node.outputs.empty() &&
        node.outputs[0].shape == std::vector<int64_t>{kK, kN}) {
      ++n;
    }
  }
  return n;
}

TEST(AbsorbWeightTranspose, AddmmOfPermutedWeightReadsTheWeightAsItIs) {
  const std::vector<float> w = UniformFloats(kN * kK, -1.f, 1.f, 1);
  const std::vector<float> bias = UniformFloats(kN, -1.f, 1.f, 2);
  ConstantTable consts;
  consts.Add(w);
  consts.Add(bias);
  GraphBuilder b;
  int x = b.Input({kM, kK});
  int cw = b.Constant(w, {kN, kK}, "w");
  int cb = b.Constant(bias, {kN}, "b");
  int t = b.Call("aten.permute.default", {Ref(cw), IntList({1, 0})}, "t");
  int mm = b.Call("aten.addmm.default", {Ref(cb), Ref(x), Ref(t)}, "addmm");
  b.Output(b.Call("aten.relu.default", {Ref(mm)}, "relu"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.addmm");
  EXPECT_EQ(TransposedCopies(**cg), 0) << DumpCompiledGraph(**cg);
  const std::vector<float> in = UniformFloats(kM * kK, -1.f, 1.f, 3);
  std::vector<float> out(kM * kN);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  const std::vector<double> ref = Linear(in, w, &bias);
  for (int i = 0; i < kM * kN; ++i) EXPECT_NEAR(out[i], std::max(0.0, ref[i]), 1e-5);
}

TEST(AbsorbWeightTranspose, TransposeWithAnotherUserStaysForIt) {
  const std::vector<float> w = UniformFloats(kN * kK, -1.f, 1.f, 4);
  ConstantTable consts;
  consts.Add(w);
  GraphBuilder b;
  int x = b.Input({kM, kK});
  int cw = b.Constant(w, {kN, kK}, "w");
  int t = b.Call("aten.permute.default", {Ref(cw), IntList({1, 0})}, "t");
  b.Output(b.Call("aten.mm.default", {Ref(x), Ref(t)}, "mm"));
  b.Output(t);
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  const std::vector<float> in = UniformFloats(kM * kK, -1.f, 1.f, 5);
  std::vector<float> out(kM * kN), transposed(kK * kN);
  const void* ins[] = {in.data()};
  void* outs[] = {out.data(), transposed.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok()) << DumpCompiledGraph(**cg);
  const std::vector<double> ref = Linear(in, w, nullptr);
  for (int i = 0; i < kM * kN; ++i) EXPECT_NEAR(out[i], ref[i], 1e-5);
  for (int k = 0; k < kK; ++k)
    for (int j = 0; j < kN; ++j) EXPECT_EQ(transposed[k * kN + j], w[j * kK + k]);
}

}  // namespace
}  // namespace kiln::runtime
