// Tests NodeArgs: positional vs keyword arguments, defaults, None, kind
// checks and their node-named messages, constant data lookup.
#include "runtime/ops/op_def.h"

#include <vector>

#include "gtest/gtest.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

Arg TensorArg(int node) { return runtime::TensorArg(ValueRef{node, 0}); }

// Graph: node 0 input f32[2,3], node 1 constant f32[3], node 2 the op.
class NodeArgsTest : public ::testing::Test {
 protected:
  NodeArgsTest() {
    Node in;
    in.kind = Node::Kind::kInput;
    in.input_index = 0;
    in.outputs = {F32({2, 3})};
    Node c;
    c.kind = Node::Kind::kConstant;
    c.outputs = {F32({3})};
    Node op;
    op.name = "conv1";
    op.target = "aten.convolution.default";
    graph_.nodes = {in, c, op};
    constant_data_ = {nullptr, constant_.data(), nullptr};
  }

  Node& op() { return graph_.nodes[2]; }
  NodeArgs Args() { return NodeArgs(graph_, graph_.nodes[2], constant_data_); }

  Graph graph_;
  std::vector<float> constant_ = {1, 2, 3};
  std::vector<const void*> constant_data_;
};

TEST_F(NodeArgsTest, ReadsPositionalArguments) {
  op().args = {TensorArg(0), IntArg(7), FloatArg(0.5), BoolArg(true),
               IntListArg({1, 2})};
  NodeArgs args = Args();
  EXPECT_EQ(*args.Tensor(0, "input"), F32({2, 3}));
  EXPECT_EQ(*args.Int(1, "groups"), 7);
  EXPECT_EQ(*args.Float(2, "eps"), 0.5);
  EXPECT_EQ(*args.Bool(3, "training", false), true);
  EXPECT_EQ(*args.IntList(4, "stride"), (std::vector<int64_t>{1, 2}));
}

TEST_F(NodeArgsTest, ReadsKeywordArguments) {
  op().args = {TensorArg(0)};
  op().kwargs = {{"groups", IntArg(4)},
                 {"eps", FloatArg(1e-5)},
                 {"stride", IntListArg({2, 2})},
                 {"bias", TensorArg(1)}};
  NodeArgs args = Args();
  EXPECT_EQ(*args.Int(1, "groups"), 4);
  EXPECT_EQ(*args.Float(2, "eps"), 1e-5);
  EXPECT_EQ(*args.IntList(3, "stride"), (std::vector<int64_t>{2, 2}));
  auto bias = args.OptionalTensor(5, "bias");
  ASSERT_TRUE(bias.ok());
  ASSERT_TRUE(bias->has_value());
  EXPECT_EQ(**bias, F32({3}));
}

TEST_F(NodeArgsTest, AbsentAndNoneTakeDefaults) {
  op().args = {TensorArg(0), NoneArg()};
  op().kwargs = {{"keepdim", NoneArg()}};
  NodeArgs args = Args();
  EXPECT_EQ(args.Find(1, "dim"), nullptr);
  EXPECT_EQ(*args.Int(1, "dim", 3), 3);
  EXPECT_EQ(*args.Bool(2, "keepdim", true), true);
  EXPECT_EQ(*args.Float(5, "alpha", 2.5), 2.5);
  EXPECT_EQ(*args.IntList(6, "padding", {0, 0}),
            (std::vector<int64_t>{0, 0}));
  auto opt = args.OptionalIntList(1, "dim");
  ASSERT_TRUE(opt.ok());
  EXPECT_FALSE(opt->has_value());
  auto t = args.OptionalTensor(1, "bias");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_value());
}

TEST_F(NodeArgsTest, NodeArgsAcceptsIntForFloat) {
  op().args = {TensorArg(0), IntArg(2)};
  EXPECT_EQ(*Args().Float(1, "alpha"), 2.0);
}

TEST_F(NodeArgsTest, NodeArgsAcceptsSingleIntForIntList) {
  op().args = {TensorArg(0), IntArg(3)};
  EXPECT_EQ(*Args().IntList(1, "kernel_size"), (std::vector<int64_t>{3}));
  auto opt = Args().OptionalIntList(1, "dim");
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(**opt, (std::vector<int64_t>{3}));
}

TEST_F(NodeArgsTest, NodeArgsRejectsWrongKind) {
  op().args = {TensorArg(0), FloatArg(1.5), StringArg("x"), IntArg(1),
               IntArg(0)};
  NodeArgs args = Args();
  absl::Status s = args.IntList(2, "stride").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "node 'conv1' (aten.convolution.default): stride must be a list "
            "of ints, got a string");
  EXPECT_EQ(args.Int(1, "groups").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(args.Bool(3, "transposed", false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(args.Float(2, "eps").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(args.Tensor(1, "weight").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeArgsTest, NodeArgsRejectsListWithNonIntItems) {
  Arg list = IntListArg({1});
  list.list.push_back(FloatArg(2.0));
  op().args = {TensorArg(0), list};
  absl::Status s = Args().IntList(1, "padding").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("padding must be a list of ints"),
            std::string::npos);
}

TEST_F(NodeArgsTest, NodeArgsRejectsMissingRequiredArgument) {
  op().args = {TensorArg(0)};
  NodeArgs args = Args();
  absl::Status s = args.Tensor(1, "weight").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("node 'conv1'"), std::string::npos);
  EXPECT_NE(s.message().find("weight"), std::string::npos);
  EXPECT_FALSE(args.Int(1, "groups").ok());
  EXPECT_FALSE(args.Float(1, "eps").ok());
  EXPECT_FALSE(args.IntList(1, "stride").ok());
}

TEST_F(NodeArgsTest, NodeArgsRejectsDanglingTensorReference) {
  op().args = {TensorArg(9)};
  EXPECT_EQ(Args().Tensor(0, "input").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NodeArgsTest, ConstantDataOnlyForConstants) {
  op().args = {TensorArg(0), TensorArg(1), IntArg(1)};
  NodeArgs args = Args();
  EXPECT_EQ(args.ConstantData(0, "input"), nullptr);
  EXPECT_EQ(args.ConstantData(1, "weight"), constant_.data());
  EXPECT_EQ(args.ConstantData(2, "groups"), nullptr);
  EXPECT_EQ(args.ConstantData(3, "bias"), nullptr);
}

TEST_F(NodeArgsTest, ErrorAndUnimplementedNameTheNode) {
  NodeArgs args = Args();
  absl::Status e = args.Error("groups must be positive");
  EXPECT_EQ(e.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.message(),
            "node 'conv1' (aten.convolution.default): groups must be "
            "positive");
  absl::Status u = args.Unimplemented("transposed");
  EXPECT_EQ(u.code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(u.message(), "node 'conv1' (aten.convolution.default): transposed");
}

}  // namespace
}  // namespace kiln::runtime::testing
