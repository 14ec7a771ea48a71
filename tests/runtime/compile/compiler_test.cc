// Compile + Execute of small graphs through the real registry and kernels,
// checked against values computed here.
#include "runtime/compile/compiler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <atomic>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ops/registry.h"
#include "runtime/util/sha256.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::None;
using kiln::testing::Ref;
using kiln::testing::RefList;

// Constant bytes by hash, as the daemon's constant store holds them.
using Constants = kiln::testing::ConstantTable;

TEST(Compiler, RunsAddReluChainAgainstReference) {
  GraphBuilder b;
  std::vector<float> bias = {-1.f, 0.5f, 2.f};
  int x = b.Input({2, 3});
  int c = b.Constant(bias, {3});
  int add = b.Call("aten.add.Tensor", {Ref(x), Ref(c)});
  int relu = b.Call("aten.relu.default", {Ref(add)});
  int view = b.Call("aten.view.default", {Ref(relu), IntList({3, 2})});
  b.Output(view);
  b.Output(add);
  Constants consts;
  consts.Add(bias);
  auto ir = GraphFromProto(b.graph());
  ASSERT_TRUE(ir.ok()) << ir.status();
  auto cg = Compile(*std::move(ir), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->output_metas.size(), 2u);
  EXPECT_EQ((*cg)->output_metas[0].shape, (std::vector<int64_t>{3, 2}));

  std::vector<float> in = {0.f, -1.f, 3.f, 1.5f, -0.5f, -5.f};
  std::vector<float> out0(6, 99.f), out1(6, 99.f);
  const void* inputs[] = {in.data()};
  void* outputs[] = {out0.data(), out1.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  for (int i = 0; i < 6; ++i) {
    double sum = static_cast<double>(in[i]) + bias[i % 3];
    EXPECT_NEAR(out1[i], sum, 1e-6);
    EXPECT_NEAR(out0[i], std::max(sum, 0.0), 1e-6);
  }
}

// The slot of `node`'s first output in the compiled graph.
const ValueSlot& SlotOf(const CompiledGraph& cg, int node) { return cg.slots[node][0]; }

TEST(Compiler, OutputsAreComputedInTheCallersMemory) {
  // add is read by relu after it is written: still an output in place.
  constexpr int kRows = 64, kCols = 64;  // 16 KiB a tensor
  GraphBuilder b;
  int x = b.Input({kRows, kCols});
  int add = b.Call("aten.add.Tensor", {Ref(x), Ref(x)});
  int relu = b.Call("aten.relu.default", {Ref(add)});
  b.Output(add);
  b.Output(b.Call("aten.neg.default", {Ref(relu)}));
  auto cg = Compile(*GraphFromProto(b.graph()), Constants().Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(SlotOf(**cg, add).kind, ValueSlot::Kind::kOutput);
  EXPECT_EQ(SlotOf(**cg, add).index, 0);
  // relu and neg become one fused step, computed into output 1.
  const ValueSlot& last = SlotOf(**cg, (*cg)->graph.outputs[1].node);
  EXPECT_EQ(last.kind, ValueSlot::Kind::kOutput);
  EXPECT_EQ(last.index, 1);
  EXPECT_LT((*cg)->arena_bytes, kRows * kCols * 4) << DumpCompiledGraph(**cg);
  std::vector<float> in(kRows * kCols), out0(in.size(), 99.f), out1(in.size(), 99.f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) - 3.f;
  const void* inputs[] = {in.data()};
  void* outputs[] = {out0.data(), out1.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out0[i], 2 * in[i]);
    EXPECT_EQ(out1[i], -std::max(2 * in[i], 0.f));
  }
}

TEST(Compiler, AValueReturnedTwiceOrWithItsViewIsCopiedToEachOutput) {
  GraphBuilder b;
  int x = b.Input({2, 3});
  int relu = b.Call("aten.relu.default", {Ref(x)});
  int view = b.Call("aten.view.default", {Ref(relu), IntList({3, 2})});
  b.Output(relu);
  b.Output(view);
  b.Output(relu);
  auto cg = Compile(*GraphFromProto(b.graph()), Constants().Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(SlotOf(**cg, relu).kind, ValueSlot::Kind::kArena);
  std::vector<float> in = {0.f, -1.f, 3.f, 1.5f, -0.5f, -5.f};
  std::vector<std::vector<float>> outs(3, std::vector<float>(6, 99.f));
  const void* inputs[] = {in.data()};
  void* outputs[] = {outs[0].data(), outs[1].data(), outs[2].data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  for (const auto& out : outs) {
    for (int i = 0; i < 6; ++i) EXPECT_EQ(out[i], std::max(in[i], 0.f));
  }
}

TEST(Compiler, CloneIsAnAliasNotACopy) {
  // relu(x).permute(0, 2, 1).contiguous(), and relu of that: the permute is
  // computed, the clone after it shares its bytes.
  GraphBuilder b;
  int x = b.Input({2, 3, 4});
  int relu = b.Call("aten.relu.default", {Ref(x)});
  int perm = b.Call("aten.permute.default", {Ref(relu), IntList({0, 2, 1})});
  int clone = b.Call("aten.clone.default", {Ref(perm)});
  b.Output(b.Call("aten.relu.default", {Ref(clone)}));
  b.Output(clone);
  auto ir = GraphFromProto(b.graph());
  ASSERT_TRUE(ir.ok()) << ir.status();
  Constants none;
  auto cg = Compile(*std::move(ir), none.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  for (const CompiledStep& step : (*cg)->steps) {
    EXPECT_NE((*cg)->graph.nodes[step.node].target, "aten.clone.default");
  }
  std::vector<float> in(24), plus(24), copy(24);
  for (int i = 0; i < 24; ++i) in[i] = static_cast<float>(i % 7) - 3.f;
  const void* inputs[] = {in.data()};
  void* outputs[] = {plus.data(), copy.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int c = 0; c < 3; ++c) {
        const float want = std::max(in[(n * 3 + c) * 4 + j], 0.f);
        EXPECT_EQ(copy[(n * 4 + j) * 3 + c], want);
        EXPECT_EQ(plus[(n * 4 + j) * 3 + c], want);
      }
    }
  }
}

TEST(Compiler, LetsGoOfAWeightOnceItsKernelPackedIt) {
  // A linear (weight packed at prepare time) and an offset every run reads:
  // the compile reports the weight's hash as soon as its kernel is
  // prepared, never the offset's, and the graph still computes the linear.
  GraphBuilder b;
  const std::vector<float> w = kiln::testing::UniformFloats(128 * 64, -1, 1, 3);
  const std::vector<float> offset = kiln::testing::UniformFloats(128, -1, 1, 4);
  int x = b.Input({4, 64});
  int wc = b.Constant(w, {128, 64});
  int oc = b.Constant(offset, {128});
  int wt = b.Call("aten.t.default", {Ref(wc)});
  int mm = b.Call("aten.mm.default", {Ref(x), Ref(wt)});
  int add = b.Call("aten.add.Tensor", {Ref(mm), Ref(oc)});
  b.Output(add);
  Constants consts;
  consts.Add(w);
  consts.Add(offset);
  std::vector<std::string> released;
  CompileHints hints;
  hints.release_constant = [&](const std::string& hash) { released.push_back(hash); };
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver(), {}, hints);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(released, (std::vector<std::string>{Sha256Hex(w.data(), w.size() * 4)}));

  const std::vector<float> in = kiln::testing::UniformFloats(4 * 64, -1, 1, 5);
  std::vector<float> out(4 * 128);
  const void* inputs[] = {in.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 128; ++c) {
      double sum = offset[c];
      for (int k = 0; k < 64; ++k) sum += static_cast<double>(in[r * 64 + k]) * w[c * 64 + k];
      EXPECT_NEAR(out[r * 128 + c], sum, 1e-4) << r << "," << c;
    }
  }
}

// A weight standardized by a training-mode batch norm over its own
// values, as NF-Nets' convolutions do on every call: conv(x, bn(w)).
struct StandardizedWeightConv {
  std::vector<float> w = kiln::testing::UniformFloats(4 * 3 * 3 * 3, -1, 1, 7);
  int bn = -1, conv = -1;
  kiln::v1::Graph Build(bool read_mean) {
    GraphBuilder b;
    int x = b.Input({1, 3, 6, 6});
    int wc = b.Constant(w, {4, 3, 3, 3});
    int rows = b.Call("aten.view.default", {Ref(wc), IntList({1, 4, 27})});
    bn = b.Call("aten.native_batch_norm.default",
                {Ref(rows), None(), None(), None(), None(), Bool(true), Float(0.0), Float(1e-5)});
    int back = b.Call("aten.view.default", {Ref(bn), IntList({4, 3, 3, 3})});
    conv = b.Call("aten.convolution.default",
                  {Ref(x), Ref(back), None(), IntList({1, 1}), IntList({0, 0}), IntList({1, 1}),
                   Bool(false), IntList({0, 0}), Int(1)});
    b.Output(conv);
    if (read_mean) b.Output(bn, 1);
    return b.graph();
  }
  // conv(x, w standardized per output channel), in double.
  // The graph compiled, with the weight among its constants.
  // The table outlives the compiled graph, which may read its bytes.
  Constants consts;
  absl::StatusOr<std::unique_ptr<CompiledGraph>> Compiled(bool read_mean) {
    consts.Add(w);
    return Compile(*GraphFromProto(Build(read_mean)), consts.Resolver());
  }
  std::vector<double> Reference(const std::vector<float>& x) const {
    std::vector<double> ws(w.size());
    for (int o = 0; o < 4; ++o) {
      double mean = 0, var = 0;
      for (int k = 0; k < 27; ++k) mean += w[o * 27 + k] / 27.0;
      for (int k = 0; k < 27; ++k) var += (w[o * 27 + k] - mean) * (w[o * 27 + k] - mean) / 27.0;
      for (int k = 0; k < 27; ++k) ws[o * 27 + k] = (w[o * 27 + k] - mean) / std::sqrt(var + 1e-5);
    }
    std::vector<double> y(4 * 4 * 4);
    for (int o = 0; o < 4; ++o) {
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 4; ++c) {
          double sum = 0;
          for (int i = 0; i < 3; ++i) {
            for (int kr = 0; kr < 3; ++kr) {
              for (int kc = 0; kc < 3; ++kc) {
                sum += ws[((o * 3 + i) * 3 + kr) * 3 + kc] * x[(i * 6 + r + kr) * 6 + c + kc];
              }
            }
          }
          y[(o * 4 + r) * 4 + c] = sum;
        }
      }
    }
    return y;
  }
};

TEST(Compiler, FoldsANodeOfSeveralOutputsWhenOnlyItsFirstIsRead) {
  StandardizedWeightConv m;
  auto cg = m.Compiled(/*read_mean=*/false);
  ASSERT_TRUE(cg.ok()) << cg.status();
  // The batch norm ran at compile time: only the convolution runs.
  ASSERT_EQ((*cg)->steps.size(), 1u);
  EXPECT_EQ((*cg)->graph.nodes[(*cg)->steps[0].node].target, "kiln.conv2d");
  const std::vector<float> x = kiln::testing::UniformFloats(3 * 6 * 6, -1, 1, 8);
  std::vector<float> out(4 * 4 * 4);
  const void* inputs[] = {x.data()};
  void* outputs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  const std::vector<double> want = m.Reference(x);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-4) << i;
}

TEST(Compiler, KeepsANodeOfSeveralOutputsWhoseOtherOutputIsRead) {
  // The saved mean is a graph output too: the node runs on every call and
  // gives all three.
  StandardizedWeightConv m;
  auto cg = m.Compiled(/*read_mean=*/true);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_NE(SlotOf(**cg, m.bn).kind, ValueSlot::Kind::kConstant);
  const std::vector<float> x = kiln::testing::UniformFloats(3 * 6 * 6, -1, 1, 8);
  std::vector<float> out(4 * 4 * 4), mean(4, 99.f);
  const void* inputs[] = {x.data()};
  void* outputs[] = {out.data(), mean.data()};
  ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
  const std::vector<double> want = m.Reference(x);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-4) << i;
  for (int o = 0; o < 4; ++o) {
    double sum = 0;
    for (int k = 0; k < 27; ++k) sum += m.w[o * 27 + k];
    EXPECT_NEAR(mean[o], sum / 27.0, 1e-5) << o;
  }
}

TEST(Compiler, RefusesMissingConstantsNamingEachOnce) {
  GraphBuilder b;
  int x = b.Input({3});
  int c = b.Constant({1.f, 2.f, 3.f}, {3});
  int same = b.Constant({1.f, 2.f, 3.f}, {3});
  int other = b.Constant({4.f, 5.f, 6.f}, {3});
  int sum = b.Call("aten.add.Tensor", {Ref(x), Ref(c)});
  sum = b.Call("aten.add.Tensor", {Ref(sum), Ref(same)});
  b.Output(b.Call("aten.add.Tensor", {Ref(sum), Ref(other)}));
  Graph graph = *GraphFromProto(b.graph());
  Constants none;
  auto cg = Compile(graph, none.Resolver());
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cg.status().message().find("and 2 more constants"), std::string::npos)
      << cg.status();
  // What the client is asked to upload: each weight once.
  std::vector<std::string> want = {graph.nodes[c].constant_hash, graph.nodes[other].constant_hash};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(MissingConstantsOf(cg.status()), want);
  EXPECT_TRUE(MissingConstantsOf(absl::FailedPreconditionError("other")).empty());
  EXPECT_TRUE(MissingConstantsOf(absl::OkStatus()).empty());
}

TEST(Compiler, RefusesConstantWhoseSizeDisagreesWithMeta) {
  GraphBuilder b;
  std::vector<float> v = {1.f, 2.f, 3.f};
  int c = b.Constant(v, {3});
  b.graph().mutable_nodes(c)->mutable_constant()->mutable_meta()->set_shape(0, 4);
  b.graph().mutable_nodes(c)->mutable_constant()->mutable_meta()->clear_strides();
  b.Output(b.Call("aten.relu.default", {Ref(c)}));
  Constants consts;
  consts.Add(v);
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Compiler, RefusesReferenceToMissingOutputIndex) {
  GraphBuilder b;
  int x = b.Input({3});
  int r = b.Call("aten.relu.default", {Ref(x)}, "r");
  b.Output(b.Call("aten.relu.default", {Ref(r, 2)}, "uses_r_2"));
  Constants none;
  auto cg = Compile(*GraphFromProto(b.graph()), none.Resolver());
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cg.status().message().find("uses_r_2"), std::string::npos);
}

TEST(Compiler, RefusesPlanAboveMemoryLimit) {
  GraphBuilder b;
  int x = b.Input({1024, 1024});
  // The 4 MiB intermediate is planned (the output goes to the caller's memory).
  int r = b.Call("aten._softmax.default", {Ref(x), kiln::testing::Int(1), Bool(false)});
  b.Output(b.Call("aten._softmax.default", {Ref(r), kiln::testing::Int(0), Bool(false)}));
  Constants none;
  CompileLimits limits;
  limits.max_arena_bytes = 1 << 20;
  auto cg = Compile(*GraphFromProto(b.graph()), none.Resolver(), limits);
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(Compiler, ConcurrentExecutionsGiveIndependentResults) {
  GraphBuilder b;
  int x = b.Input({4096});
  b.Output(b.Call("aten.relu.default", {Ref(b.Call("aten.add.Tensor", {Ref(x), Ref(x)}))}));
  Constants none;
  auto cg = Compile(*GraphFromProto(b.graph()), none.Resolver());
  ASSERT_TRUE(cg.ok());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> in(4096), out(4096);
      for (int it = 0; it < 50; ++it) {
        for (int i = 0; i < 4096; ++i) in[i] = static_cast<float>((i + t * 7 + it) % 13) - 6.f;
        const void* inputs[] = {in.data()};
        void* outputs[] = {out.data()};
        if (!Execute(**cg, inputs, outputs).ok()) failures++;
        for (int i = 0; i < 4096; ++i) {
          if (out[i] != std::max(2 * in[i], 0.f)) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace kiln::runtime
