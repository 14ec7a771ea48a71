// EliminateCommonSubexpressions through Compile(): Res2Net's repeated
// splits of one value run once, with the same results; ops that differ in
// an argument (however slightly) stay apart; one value returned twice
// fills both outputs.
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

namespace kiln::runtime {
namespace {

using kiln::testing::ConstantTable;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

std::unique_ptr<CompiledGraph> CompileOrDie(GraphBuilder& b) {
  ConstantTable none;
  auto cg = Compile(*GraphFromProto(b.graph()), none.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

int StepsOf(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const CompiledStep& step : cg.steps) n += cg.graph.nodes[step.node].target == target;
  return n;
}

// out = cat(chunk0, chunk0 + chunk1, chunk1 + chunk2, chunk3) of x split
// into 4 chunks of 3 along dim 1, the split repeated for every chunk read
// (as Dynamo hands Res2Net's blocks over).
TEST(EliminateCommonSubexpressions, RepeatedSplitsRunOnce) {
  constexpr int C = 12, L = 5;
  GraphBuilder b;
  const int x = b.Input({2, C, L});
  int split[4];
  for (int& s : split) {
    s = b.Call("aten.split_with_sizes.default", {Ref(x), IntList({3, 3, 3, 3}), Int(1)}, "split");
  }
  const int a1 = b.Call("aten.add.Tensor", {Ref(split[0], 0), Ref(split[1], 1)});
  const int a2 = b.Call("aten.add.Tensor", {Ref(split[1], 1), Ref(split[2], 2)});
  kiln::v1::Argument parts;
  for (const auto& r : {Ref(split[0], 0), Ref(a1), Ref(a2), Ref(split[3], 3)}) {
    *parts.mutable_list()->add_items() = r;
  }
  b.Output(b.Call("aten.cat.default", {parts, Int(1)}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_LE(StepsOf(*cg, "aten.split_with_sizes.default"), 1) << DumpCompiledGraph(*cg);

  const std::vector<float> in_x = UniformFloats(2 * C * L, -1.f, 1.f, 7);
  std::vector<float> y(2 * C * L, 0.f);
  const void* in[] = {in_x.data()};
  void* out[] = {y.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  auto at = [&](int n, int c, int l) { return in_x[(n * C + c) * L + l]; };
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < C; ++c)
      for (int l = 0; l < L; ++l) {
        const int chunk = c / 3, k = c % 3;
        float want = at(n, c, l);
        if (chunk == 1) want = at(n, k, l) + at(n, 3 + k, l);
        if (chunk == 2) want = at(n, 3 + k, l) + at(n, 6 + k, l);
        EXPECT_FLOAT_EQ(y[(n * C + c) * L + l], want) << n << " " << c << " " << l;
      }
}

// mul by 0.1 and by the next double after 0.1: different arguments, two
// computations (even though f32 arithmetic rounds both to one factor).
TEST(EliminateCommonSubexpressions, ArgumentsMustMatchExactly) {
  GraphBuilder b;
  const int x = b.Input({4});
  b.Output(b.Call("aten.mul.Tensor", {Ref(x), Float(0.1)}));
  b.Output(b.Call("aten.mul.Tensor", {Ref(x), Float(std::nextafter(0.1, 1.0))}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  const std::vector<float> in_x = {1.f, 2.f, 3.f, 1e30f};
  std::vector<float> y0(4), y1(4);
  const void* in[] = {in_x.data()};
  void* out[] = {y0.data(), y1.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  EXPECT_EQ(cg->steps.size(), 2u) << DumpCompiledGraph(*cg);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(y0[i], in_x[i] * 0.1f) << i;
    EXPECT_EQ(y1[i], in_x[i] * 0.1f) << i;
  }
}

// The same op twice, each returned: one computation, both outputs filled.
TEST(EliminateCommonSubexpressions, OneValueReturnedTwiceFillsBothOutputs) {
  GraphBuilder b;
  const int x = b.Input({3, 4});
  b.Output(b.Call("aten.exp.default", {Ref(x)}));
  b.Output(b.Call("aten.exp.default", {Ref(x)}));
  auto cg = CompileOrDie(b);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(StepsOf(*cg, "aten.exp.default"), 1) << DumpCompiledGraph(*cg);
  const std::vector<float> in_x = UniformFloats(12, -2.f, 2.f, 3);
  std::vector<float> y0(12, 0.f), y1(12, 0.f);
  const void* in[] = {in_x.data()};
  void* out[] = {y0.data(), y1.data()};
  ASSERT_TRUE(Execute(*cg, in, out).ok());
  for (int i = 0; i < 12; ++i) {
    EXPECT_FLOAT_EQ(y0[i], std::exp(in_x[i])) << i;
    EXPECT_FLOAT_EQ(y1[i], std::exp(in_x[i])) << i;
  }
}

}  // namespace
}  // namespace kiln::runtime
