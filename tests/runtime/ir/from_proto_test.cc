// Decoding of wire graphs: every malformed message is refused with a status
// naming the node.
#include "runtime/ir/from_proto.h"

#include "gtest/gtest.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::Ref;

TEST(FromProto, DecodesInputsConstantsAndCalls) {
  GraphBuilder b;
  int x = b.Input({2, 3}, "x");
  int c = b.Constant(std::vector<float>(6, 1.f), {2, 3}, "w");
  int add = b.Call("aten.add.Tensor", {Ref(x), Ref(c)}, "add");
  b.Output(add);
  auto g = GraphFromProto(b.graph());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->num_inputs, 1);
  EXPECT_EQ(g->nodes[1].kind, Node::Kind::kConstant);
  EXPECT_EQ(g->nodes[2].target, "aten.add.Tensor");
  ASSERT_EQ(g->nodes[2].args.size(), 2u);
  EXPECT_EQ(g->nodes[2].args[1].tensor.node, 1);
}

TEST(FromProto, RejectsUnknownOpNamingTheNode) {
  GraphBuilder b;
  int x = b.Input({4});
  int y = b.Call("aten.not_a_kiln_op.default", {Ref(x)}, "mystery");
  b.Output(y);
  auto g = GraphFromProto(b.graph());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("mystery"), std::string::npos);
  EXPECT_NE(g.status().message().find("aten.not_a_kiln_op.default"), std::string::npos);
}

TEST(FromProto, RejectsForwardAndDanglingReferences) {
  GraphBuilder b;
  int x = b.Input({4});
  int y = b.Call("aten.relu.default", {Ref(x + 5)}, "r");
  b.Output(y);
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);

  GraphBuilder self;
  self.Input({4});
  int s = self.Call("aten.relu.default", {Ref(1)}, "loop");  // refers to itself
  self.Output(s);
  EXPECT_EQ(GraphFromProto(self.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsOutputsOfMissingNodes) {
  GraphBuilder b;
  b.Input({4});
  b.Output(7);
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsNonContiguousPlaceholder) {
  GraphBuilder b;
  int x = b.Input({2, 3});
  b.graph().mutable_nodes(x)->mutable_placeholder()->mutable_meta()->set_strides(0, 1);
  b.Output(x);
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsHugeAndNegativeShapes) {
  GraphBuilder huge;
  int x = huge.Input({1 << 30, 1 << 30, 1 << 30});
  huge.Output(x);
  EXPECT_EQ(GraphFromProto(huge.graph()).status().code(), absl::StatusCode::kResourceExhausted);

  GraphBuilder neg;
  int y = neg.Input({2, -3});
  neg.Output(y);
  EXPECT_EQ(GraphFromProto(neg.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsMalformedConstantHash) {
  GraphBuilder b;
  int c = b.Constant({1.f}, {1});
  b.graph().mutable_nodes(c)->mutable_constant()->set_hash("../../etc/passwd");
  b.Output(c);
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsDeeplyNestedArguments) {
  GraphBuilder b;
  int x = b.Input({4});
  kiln::v1::Argument deep = Int(1);
  for (int i = 0; i < 20; ++i) {
    kiln::v1::Argument outer;
    *outer.mutable_list()->add_items() = deep;
    deep = outer;
  }
  int y = b.Call("aten.relu.default", {Ref(x), deep});
  b.Output(y);
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FromProto, RejectsNodeWithoutKindAndGraphWithoutOutputs) {
  kiln::v1::Graph g;
  g.add_nodes()->set_name("empty");
  EXPECT_EQ(GraphFromProto(g).status().code(), absl::StatusCode::kInvalidArgument);
  GraphBuilder b;
  b.Input({1});
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime
