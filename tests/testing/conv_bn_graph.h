// The graph the cache and compile tests compile to see derived constants
// made, saved and found again: conv (3x3, padding 1) -> batch norm
// (inference) -> relu, then a tail. Compiling it folds the batch norm into
// the convolution's weight and bias (derived constants with share keys),
// fuses the relu into the convolution and packs the folded weight; a tail
// that adds a constant row reads a client constant at run time.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/v1/kiln.pb.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/random_floats.h"

namespace kiln::testing {

enum class ConvBnTail {
  kNone,            // relu is the output
  kAddRow,          // relu + a constant row
  kTimesTwoAddRow,  // relu * 2 + a constant row
};

struct ConvBnGraph {
  std::vector<std::vector<float>> weights;  // in the order the graph names them
  kiln::v1::Graph graph;
};

// Input [batch, ic, hw, hw] -> output [batch, oc, hw, hw]; weights random
// but the same for the same sizes.
inline ConvBnGraph BuildConvBnGraph(int64_t batch, int64_t ic, int64_t oc, int64_t hw,
                                    ConvBnTail tail) {
  ConvBnGraph g;
  GraphBuilder b;
  const int x = b.Input({batch, ic, hw, hw}, "x");
  auto constant = [&](std::vector<int64_t> shape, float lo, float hi) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    g.weights.push_back(runtime::testing::RandomFloats(
        n, static_cast<uint32_t>(g.weights.size()) + 10, lo, hi));
    return b.Constant(g.weights.back(), shape);
  };
  const int conv = b.Call("aten.convolution.default",
                          {Ref(x), Ref(constant({oc, ic, 3, 3}, -0.3f, 0.3f)),
                           Ref(constant({oc}, -0.1f, 0.1f)), IntList({1, 1}), IntList({1, 1}),
                           IntList({1, 1}), Bool(false), IntList({0, 0}), Int(1)},
                          "conv");
  const int bn = b.Call("aten.native_batch_norm.default",
                        {Ref(conv), Ref(constant({oc}, 0.5f, 1.5f)),
                         Ref(constant({oc}, -0.5f, 0.5f)), Ref(constant({oc}, -0.2f, 0.2f)),
                         Ref(constant({oc}, 0.5f, 2.f)), Bool(false), Float(0.1), Float(1e-5)},
                        "bn");
  int out = b.Call("aten.relu.default", {Ref(bn, 0)}, "relu");
  if (tail == ConvBnTail::kTimesTwoAddRow) {
    out = b.Call("aten.mul.Tensor", {Ref(out), Float(2.0)}, "mul");
  }
  if (tail != ConvBnTail::kNone) {
    out = b.Call("aten.add.Tensor", {Ref(out), Ref(constant({hw}, -1.f, 1.f))}, "add");
  }
  b.Output(out);
  g.graph = b.graph();
  return g;
}

}  // namespace kiln::testing
