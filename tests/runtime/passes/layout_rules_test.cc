// The layout pass's per-op and per-shape rules (passes/layout_rules.h),
// on their own: which shapes read the same in both orders, how broadcast
// operands and dimension arguments move into a layout.
#include "runtime/passes/layout_rules.h"

#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/ir/arg_builders.h"

namespace kiln::runtime::channels_last {
namespace {

TensorMeta F32(std::vector<int64_t> shape) { return TensorMeta{DType::kF32, std::move(shape)}; }

Node NodeWithDim(std::vector<Arg> args) {
  Node n;
  n.target = "aten.cat.default";
  n.args = std::move(args);
  return n;
}

TEST(LayoutRules, AmbiguousShapesReadTheSameInBothOrders) {
  EXPECT_TRUE(LayoutAmbiguous({1, 1, 5, 5}, Layout::kNhwc));
  EXPECT_TRUE(LayoutAmbiguous({2, 7, 1, 1}, Layout::kNhwc));
  EXPECT_TRUE(LayoutAmbiguous({7}, Layout::kNhwc));  // read as [1, 1, 1, 7]
  EXPECT_FALSE(LayoutAmbiguous({1, 3, 5, 5}, Layout::kNhwc));
  EXPECT_TRUE(LayoutAmbiguous({1, 16, 1, 1}, Layout::kBlocked));
  EXPECT_FALSE(LayoutAmbiguous({1, 6, 1, 1}, Layout::kBlocked));  // not whole blocks
  EXPECT_FALSE(LayoutAmbiguous({1, 1, 5, 5}, Layout::kBlocked));
  EXPECT_FALSE(LayoutAmbiguous({1, 1, 1, 1, 1}, Layout::kNhwc));  // rank 5
}

TEST(LayoutRules, BroadcastOperandsTakeTheirLayoutShape) {
  // Per-channel [1, C, 1, 1]: NHWC [1, 1, 1, C]; blocked [1, C/8, 1, 1, 8].
  EXPECT_EQ(BroadcastShape(F32({1, 16, 1, 1}), Layout::kNhwc),
            (std::vector<int64_t>{1, 1, 1, 16}));
  EXPECT_EQ(BroadcastShape(F32({1, 16, 1, 1}), Layout::kBlocked),
            (std::vector<int64_t>{1, 2, 1, 1, 8}));
  // Per-pixel [1, 1, H, W]: NHWC [1, H, W, 1]; blocked [1, 1, H, W, 1].
  EXPECT_EQ(BroadcastShape(F32({1, 1, 5, 5}), Layout::kNhwc), (std::vector<int64_t>{1, 5, 5, 1}));
  EXPECT_EQ(BroadcastShape(F32({1, 1, 5, 5}), Layout::kBlocked),
            (std::vector<int64_t>{1, 1, 5, 5, 1}));
  // A full operand's bytes would have to move.
  EXPECT_EQ(BroadcastShape(F32({1, 3, 5, 5}), Layout::kNhwc), std::nullopt);
  EXPECT_EQ(BroadcastShape(F32({1, 3, 5, 5}), Layout::kBlocked), std::nullopt);
  EXPECT_EQ(BroadcastShape(F32({1, 6, 1, 1}), Layout::kBlocked), std::nullopt);
}

TEST(LayoutRules, DimensionArgumentsMoveToTheirPositionInTheLayout) {
  const ValueRef x{0, 0};
  for (int64_t d : {0, 1, 2, 3, -1, -3}) {
    Node nhwc = NodeWithDim({TensorArg(x), IntArg(d)});
    ASSERT_TRUE(RemapDim(nhwc, 1, "dim", Layout::kNhwc)) << d;
    EXPECT_EQ(nhwc.args[1].i, kToPhysical[WrapDim(d, 4)]) << d;
    Node blocked = NodeWithDim({TensorArg(x), IntArg(d)});
    ASSERT_TRUE(RemapDim(blocked, 1, "dim", Layout::kBlocked)) << d;
    EXPECT_EQ(blocked.args[1].i, WrapDim(d, 4)) << d;
  }
  // Absent: the default 0, written out.
  Node absent = NodeWithDim({TensorArg(x)});
  ASSERT_TRUE(RemapDim(absent, 1, "dim", Layout::kNhwc));
  ASSERT_EQ(absent.args.size(), 2u);
  EXPECT_EQ(absent.args[1].i, 0);
  // As a keyword.
  Node keyword = NodeWithDim({TensorArg(x)});
  keyword.kwargs.push_back(NamedArg{"dim", IntArg(1)});
  ASSERT_TRUE(RemapDim(keyword, 1, "dim", Layout::kNhwc));
  EXPECT_EQ(keyword.kwargs[0].value.i, 3);
  // Out of range, or not an int.
  Node out_of_range = NodeWithDim({TensorArg(x), IntArg(4)});
  EXPECT_FALSE(RemapDim(out_of_range, 1, "dim", Layout::kNhwc));
  Node not_int = NodeWithDim({TensorArg(x), FloatArg(1.0)});
  EXPECT_FALSE(RemapDim(not_int, 1, "dim", Layout::kNhwc));
}

TEST(LayoutRules, PermutesToChannelsLastInEitherSpelling) {
  Node permute;
  permute.target = "aten.permute.default";
  permute.args = {TensorArg({0, 0}), IntListArg({0, 2, 3, 1})};
  EXPECT_TRUE(IsToNhwc(permute));
  permute.args[1] = IntListArg({0, -2, -1, 1});
  EXPECT_TRUE(IsToNhwc(permute));
  permute.args[1] = IntListArg({0, 3, 1, 2});
  EXPECT_FALSE(IsToNhwc(permute));
}

TEST(LayoutRules, OpsRunInALayoutByTheirTraits) {
  Node relu;
  relu.target = "aten.relu.default";
  EXPECT_TRUE(RunsInLayout(relu, Layout::kNhwc));
  EXPECT_TRUE(RunsInLayout(relu, Layout::kBlocked));
  Node matmul;
  matmul.target = "aten.mm.default";
  EXPECT_FALSE(RunsInLayout(matmul, Layout::kNhwc));
  Node unknown;
  unknown.target = "aten.no_such_op.default";
  EXPECT_FALSE(RunsInLayout(unknown, Layout::kNhwc));
}

}  // namespace
}  // namespace kiln::runtime::channels_last
