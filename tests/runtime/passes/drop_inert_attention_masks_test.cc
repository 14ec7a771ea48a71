// DropInertAttentionMasks through Compile(): an attention mask of zeros
// (a fill, or a constant, seen through reshapes and broadcasts) is dropped
// with the same result as no mask; a mask that adds something stays.
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
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::UniformFloats;

constexpr int64_t kHeads = 2, kLen = 24, kDim = 16;
constexpr char kAttention[] = "aten._scaled_dot_product_flash_attention_for_cpu.default";

// attention(q, k, v, attn_mask=<what `mask` adds to `b`>) as the only output.
template <typename MaskFn>
kiln::v1::Graph AttentionGraph(MaskFn mask) {
  GraphBuilder b;
  const int q = b.Input({1, kHeads, kLen, kDim});
  const int k = b.Input({1, kHeads, kLen, kDim});
  const int v = b.Input({1, kHeads, kLen, kDim});
  const int m = mask(b);
  const int att = b.Call(kAttention, {Ref(q), Ref(k), Ref(v)});
  if (m >= 0) {
    auto* kw = b.graph().mutable_nodes(att)->mutable_call()->add_kwargs();
    kw->set_name("attn_mask");
    *kw->mutable_value() = Ref(m);
  }
  b.Output(att);
  return b.graph();
}

struct Compiled {
  std::unique_ptr<CompiledGraph> cg;
  bool reads_mask = false;  // the attention step has a fourth input
  std::vector<float> out;
};

Compiled CompileAndRun(const kiln::v1::Graph& g, ConstantTable& consts) {
  Compiled c;
  auto cg = Compile(*GraphFromProto(g), consts.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  if (!cg.ok()) return c;
  c.cg = *std::move(cg);
  for (const CompiledStep& step : c.cg->steps) {
    if (c.cg->graph.nodes[step.node].target == kAttention) c.reads_mask = step.inputs.size() == 4;
  }
  const int64_t n = kHeads * kLen * kDim;
  const std::vector<float> q = UniformFloats(n, -1, 1, 1), k = UniformFloats(n, -1, 1, 2),
                           v = UniformFloats(n, -1, 1, 3);
  c.out.assign(n, 99.f);
  const void* in[] = {q.data(), k.data(), v.data()};
  void* out[] = {c.out.data()};
  const absl::Status run = Execute(*c.cg, in, out);
  EXPECT_TRUE(run.ok()) << run;
  return c;
}

TEST(DropInertAttentionMasks, AFillOfZerosIsDroppedWithItsFill) {
  ConstantTable consts;
  const Compiled none = CompileAndRun(AttentionGraph([](GraphBuilder&) { return -1; }), consts);
  const Compiled zeros = CompileAndRun(AttentionGraph([](GraphBuilder& b) {
                                         return b.Call("aten.full.default",
                                                       {IntList({1, kHeads, kLen, kLen}), Float(0)});
                                       }),
                                       consts);
  ASSERT_NE(zeros.cg, nullptr);
  EXPECT_FALSE(zeros.reads_mask) << DumpCompiledGraph(*zeros.cg);
  EXPECT_EQ(zeros.cg->steps.size(), 1u) << DumpCompiledGraph(*zeros.cg);
  EXPECT_EQ(zeros.out, none.out);
}

TEST(DropInertAttentionMasks, AConstantOfZerosSeenThroughABroadcastIsDropped) {
  ConstantTable consts;
  const std::vector<float> zero_row(kLen, 0.f);
  consts.Add(zero_row);
  const Compiled none = CompileAndRun(AttentionGraph([](GraphBuilder&) { return -1; }), consts);
  const Compiled zeros = CompileAndRun(
      AttentionGraph([&](GraphBuilder& b) {
        const int row = b.Constant(zero_row, {1, 1, 1, kLen});
        return b.Call("aten.expand.default", {Ref(row), IntList({1, kHeads, kLen, kLen})});
      }),
      consts);
  ASSERT_NE(zeros.cg, nullptr);
  EXPECT_FALSE(zeros.reads_mask) << DumpCompiledGraph(*zeros.cg);
  EXPECT_EQ(zeros.out, none.out);
}

TEST(DropInertAttentionMasks, AMaskThatAddsSomethingStays) {
  ConstantTable consts;
  std::vector<float> row(kLen, 0.f);
  row[3] = -1e9f;  // key 3 masked for every query
  consts.Add(row);
  const Compiled none = CompileAndRun(AttentionGraph([](GraphBuilder&) { return -1; }), consts);
  const Compiled masked = CompileAndRun(
      AttentionGraph([&](GraphBuilder& b) { return b.Constant(row, {1, 1, 1, kLen}); }), consts);
  ASSERT_NE(masked.cg, nullptr);
  EXPECT_TRUE(masked.reads_mask);
  EXPECT_NE(masked.out, none.out);
  // A fill of a nonzero value is no more inert.
  const Compiled filled = CompileAndRun(AttentionGraph([](GraphBuilder& b) {
                                          return b.Call("aten.full.default",
                                                        {IntList({1, 1, kLen, kLen}), Float(0.5)});
                                        }),
                                        consts);
  ASSERT_NE(filled.cg, nullptr);
  EXPECT_TRUE(filled.reads_mask);
}

}  // namespace
}  // namespace kiln::runtime
