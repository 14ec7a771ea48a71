// Graph keys: structural (names do not matter), sensitive to everything
// that changes the compiled result.
#include "cache/graph_key.h"

#include "gtest/gtest.h"
#include "tests/testing/proto_graph.h"

namespace kiln::cache {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;

kiln::v1::Graph Sample(const std::string& prefix, float weight) {
  GraphBuilder b;
  int x = b.Input({2}, prefix + "x");
  int c = b.Constant({weight, 1.f}, {2}, prefix + "w");
  b.Output(b.Call("aten.add.Tensor", {Ref(x), Ref(c)}, prefix + "add"));
  return b.graph();
}

TEST(GraphKey, NodeNamesDoNotChangeTheKey) {
  EXPECT_EQ(GraphKey(Sample("a_", 1.f), {}), GraphKey(Sample("other_", 1.f), {}));
}

TEST(GraphKey, ConstantValuesChangeTheKey) {
  EXPECT_NE(GraphKey(Sample("a_", 1.f), {}), GraphKey(Sample("a_", 2.f), {}));
}

TEST(GraphKey, OptionsChangeTheKey) {
  EXPECT_NE(GraphKey(Sample("a_", 1.f), {}), GraphKey(Sample("a_", 1.f), {{"precision", "bf16"}}));
}

}  // namespace
}  // namespace kiln::cache
