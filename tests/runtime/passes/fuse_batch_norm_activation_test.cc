// FuseBatchNormActivation through Compile(): densenet's pattern, a batch
// norm and relu in front of a convolution that reads a concatenation (so
// no convolution absorbs the norm), becomes one channels-last batch norm
// with the relu as its post-op, with the result of the unfused graph.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "tests/testing/compiled_graph_runs.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::Bool;
using kiln::testing::CompileInLayout;
using kiln::testing::ExpectOutputsNear;
using kiln::testing::RunOnce;
using kiln::testing::StepsOf;
using kiln::testing::ConstantTable;
using kiln::testing::Float;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::None;
using kiln::testing::Ref;
using kiln::testing::RefList;
using kiln::testing::UniformFloats;

struct Built {
  ConstantTable consts;
  kiln::v1::Graph graph;
};

// DenseNet's layer: h = conv 1x1(x); cat(h, conv 1x1(h)) -> batch norm ->
// relu -> conv 1x1 -> output (h has two readers, so the batch norm folds
// into no convolution); with `relu_is_output` the relu's result is a graph
// output too.
Built DenseLayer(bool relu_is_output = false) {
  Built f;
  GraphBuilder b;
  int seed = 1;
  auto constant = [&](std::vector<int64_t> shape, float lo, float hi) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v = UniformFloats(n, lo, hi, seed++);
    f.consts.Add(v);
    return b.Constant(v, shape);
  };
  auto conv = [&](int in, int64_t cin, int64_t cout) {
    return b.Call("aten.convolution.default",
                  {Ref(in), Ref(constant({cout, cin, 1, 1}, -1, 1)), Ref(constant({cout}, -1, 1)),
                   IntList({1, 1}), IntList({0, 0}), IntList({1, 1}), Bool(false),
                   IntList({0, 0}), Int(1)});
  };
  int x = b.Input({1, 8, 6, 6});
  int h = conv(x, 8, 8);
  int cat = b.Call("aten.cat.default", {RefList({h, conv(h, 8, 8)}), Int(1)});
  int bn = b.Call("aten._native_batch_norm_legit_no_training.default",
                  {Ref(cat), Ref(constant({16}, 0.5, 1.5)), Ref(constant({16}, -1, 1)),
                   Ref(constant({16}, -0.5, 0.5)), Ref(constant({16}, 0.5, 2)), Float(0.1),
                   Float(1e-5)});
  int relu = b.Call("aten.relu.default", {Ref(bn, 0)});
  b.Output(conv(relu, 16, 8));
  if (relu_is_output) b.Output(relu);
  f.graph = b.graph();
  return f;
}

TEST(FuseBatchNormActivation, ReluBecomesThePostOpOfTheChannelsLastNorm) {
  for (bool relu_is_output : {false, true}) {
    Built f = DenseLayer(relu_is_output);
    auto nhwc = CompileInLayout(f.graph, f.consts, LayoutOption::kNhwc);
    auto nchw = CompileInLayout(f.graph, f.consts, LayoutOption::kNchw);
    ASSERT_TRUE(nhwc && nchw);
    const std::string dump = DumpCompiledGraph(*nhwc);
    EXPECT_EQ(StepsOf(*nhwc, "kiln.batch_norm_nhwc"), 1) << dump;
    EXPECT_EQ(StepsOf(*nhwc, "aten.relu.default"), 0) << dump;
    EXPECT_NE(dump.find("['relu']"), std::string::npos) << dump;
    // The unfused graph: NCHW batch norm and relu steps of their own.
    EXPECT_EQ(StepsOf(*nchw, "aten.relu.default"), 1) << DumpCompiledGraph(*nchw);
    // Different convolution kernels per layout: float rounding apart.
    const std::vector<float> x = UniformFloats(8 * 36, -1, 1, 99);
    ExpectOutputsNear(RunOnce(*nhwc, x), RunOnce(*nchw, x), 1e-5f);
  }
}

}  // namespace
}  // namespace kiln::runtime
