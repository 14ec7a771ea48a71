// DropEmptyCatInputs through Compile(): a concatenation onto an empty
// tensor (how DynamicCache starts a layer's keys and values) shares its
// input's bytes instead of copying them, and empty inputs of a longer
// concatenation are left out, with the same result either way.
#include <algorithm>
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
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::Ref;
using kiln::testing::RefList;
using kiln::testing::UniformFloats;

// The cat steps of a compiled graph, and how many tensors each reads.
std::vector<size_t> CatSteps(const CompiledGraph& cg) {
  std::vector<size_t> cats;
  for (const CompiledStep& step : cg.steps) {
    if (cg.graph.nodes[step.node].target == "aten.cat.default") cats.push_back(step.inputs.size());
  }
  return cats;
}

TEST(DropEmptyCatInputs, CatOntoAnEmptyConstantIsAnAliasOfTheOtherInput) {
  // relu(cat([empty, x], -2)), and the cat itself as a second output.
  const std::vector<float> empty;
  ConstantTable consts;
  consts.Add(empty);
  GraphBuilder b;
  int x = b.Input({2, 3, 4});
  int e = b.Constant(empty, {0}, "empty");
  int cat = b.Call("aten.cat.default", {RefList({e, x}), Int(-2)}, "cat");
  b.Output(b.Call("aten.relu.default", {Ref(cat)}, "relu"));
  b.Output(cat);
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_TRUE(CatSteps(**cg).empty()) << DumpCompiledGraph(**cg);
  const std::vector<float> in = UniformFloats(24, -1.f, 1.f, 1);
  std::vector<float> relu(24), copy(24);
  const void* ins[] = {in.data()};
  void* outs[] = {relu.data(), copy.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(copy[i], in[i]);
    EXPECT_EQ(relu[i], std::max(in[i], 0.f));
  }
}

TEST(DropEmptyCatInputs, EmptyInputsOfALongerCatAreLeftOut) {
  // cat([x, empty [2, 0, 4], y], 1): y follows x directly.
  const std::vector<float> empty;
  ConstantTable consts;
  consts.Add(empty);
  GraphBuilder b;
  int x = b.Input({2, 3, 4});
  int e = b.Constant(empty, {2, 0, 4}, "empty");
  int y = b.Input({2, 2, 4});
  b.Output(b.Call("aten.cat.default", {RefList({x, e, y}), Int(1)}, "cat"));
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(CatSteps(**cg), std::vector<size_t>{2}) << DumpCompiledGraph(**cg);
  const std::vector<float> xs = UniformFloats(24, -1.f, 1.f, 2);
  const std::vector<float> ys = UniformFloats(16, -1.f, 1.f, 3);
  std::vector<float> out(40);
  const void* ins[] = {xs.data(), ys.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int n = 0; n < 2; ++n) {
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 4; ++c) {
        const float want = r < 3 ? xs[(n * 3 + r) * 4 + c] : ys[(n * 2 + r - 3) * 4 + c];
        EXPECT_EQ(out[(n * 5 + r) * 4 + c], want) << n << " " << r << " " << c;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::runtime
