// Kernel benchmarks for the transcendental elementwise ops (exp, tanh,
// sigmoid, silu, gelu in both forms) and softmax: one op node over an f32
// tensor in L2 (64K elements) and in memory (1M elements), reporting
// elements/s (items_per_second) and bytes/s read plus written. Inputs span
// [-8, 8) so every branch of the vector math (runtime/kernels/
// vector_math.h) is taken. Then fused elementwise chains (kiln.elementwise)
// against the same ops run one kernel at a time. Real time, as in
// conv_matmul_bench.cc.
#include <memory>
#include <string>
#include <vector>

#include "bench/kernels/one_node.h"
#include "benchmark/benchmark.h"
#include "runtime/ir/arg_builders.h"

namespace kiln::runtime {
namespace {

using kiln::bench::OneNode;

// `target`(x, extra...) over state.range(0) elements.
void RunUnary(benchmark::State& state, const char* target, std::vector<Arg> extra = {}) {
  const int64_t n = state.range(0);
  OneNode node(target);
  std::vector<Arg> args = {node.Tensor({n}, false, -8, 8)};
  for (Arg& a : extra) args.push_back(std::move(a));
  if (!node.Prepare(std::move(args), state)) return;
  for (auto _ : state) {
    if (!node.Run(state)) break;
  }
  state.SetItemsProcessed(n * state.iterations());
  state.SetBytesProcessed(2 * 4 * n * state.iterations());
}

void BM_Exp(benchmark::State& state) { RunUnary(state, "aten.exp.default"); }
void BM_Tanh(benchmark::State& state) { RunUnary(state, "aten.tanh.default"); }
void BM_Sigmoid(benchmark::State& state) { RunUnary(state, "aten.sigmoid.default"); }
void BM_Silu(benchmark::State& state) { RunUnary(state, "aten.silu.default"); }
void BM_GeluErf(benchmark::State& state) { RunUnary(state, "aten.gelu.default"); }
void BM_GeluTanh(benchmark::State& state) {
  RunUnary(state, "aten.gelu.default", {StringArg("tanh")});
}

#define KILN_UNARY_BENCH(fn) \
  BENCHMARK(fn)->Arg(1 << 16)->Arg(1 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond)
KILN_UNARY_BENCH(BM_Exp);
KILN_UNARY_BENCH(BM_Tanh);
KILN_UNARY_BENCH(BM_Sigmoid);
KILN_UNARY_BENCH(BM_Silu);
KILN_UNARY_BENCH(BM_GeluErf);
KILN_UNARY_BENCH(BM_GeluTanh);
#undef KILN_UNARY_BENCH

// Args: rows, size of the softmax dim, inner (elements after it).
void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), size = state.range(1), inner = state.range(2);
  OneNode node("aten._softmax.default");
  Arg x = node.Tensor({rows, size, inner}, false, -8, 8);
  if (!node.Prepare({x, IntArg(1), BoolArg(false)}, state)) return;
  for (auto _ : state) {
    if (!node.Run(state)) break;
  }
  const int64_t n = rows * size * inner;
  state.SetItemsProcessed(n * state.iterations());
  state.SetBytesProcessed(2 * 4 * n * state.iterations());
}
BENCHMARK(BM_Softmax)
    ->Args({8 * 12 * 128, 128, 1})  // BERT-base attention probs, batch 8
    ->Args({64, 1000, 1})           // classifier logits
    ->Args({8, 64, 1024})           // softmax over a middle dim
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

Arg Program(const std::vector<std::string>& instrs) {
  Arg a;
  a.kind = Arg::Kind::kList;
  for (const std::string& s : instrs) a.list.push_back(StringArg(s));
  return a;
}

// One op of an unfused chain: `target` over fresh inputs of n elements
// (the traffic of the real chain, whose inputs are the previous outputs).
struct ChainOp {
  const char* target;
  int tensors;  // tensor inputs
  std::vector<Arg> extra;
};

// Args: elements; 0 runs `ops` one kernel at a time, 1 runs `program`.
void RunChain(benchmark::State& state, const std::vector<ChainOp>& ops,
              const std::vector<std::string>& program, int program_inputs) {
  const int64_t n = state.range(0);
  std::vector<std::unique_ptr<OneNode>> nodes;
  if (state.range(1) == 0) {
    for (const ChainOp& op : ops) {
      nodes.push_back(std::make_unique<OneNode>(op.target));
      std::vector<Arg> args;
      for (int k = 0; k < op.tensors; ++k) args.push_back(nodes.back()->Tensor({n}, false, -8, 8));
      for (const Arg& a : op.extra) args.push_back(a);
      if (!nodes.back()->Prepare(std::move(args), state)) return;
    }
  } else {
    nodes.push_back(std::make_unique<OneNode>("kiln.elementwise"));
    std::vector<Arg> args;
    for (int k = 0; k < program_inputs; ++k) {
      args.push_back(nodes.back()->Tensor({n}, false, -8, 8));
    }
    args.push_back(Program(program));
    if (!nodes.back()->Prepare(std::move(args), state)) return;
  }
  for (auto _ : state) {
    for (auto& node : nodes) {
      if (!node->Run(state)) return;
    }
  }
  state.SetItemsProcessed(n * state.iterations());
  state.SetLabel(state.range(1) == 0 ? "unfused" : "fused");
}

// sigmoid(x * y + 1.5)
void BM_ChainMulAddSigmoid(benchmark::State& state) {
  RunChain(state,
           {{"aten.mul.Tensor", 2, {}}, {"aten.add.Tensor", 1, {FloatArg(1.5)}},
            {"aten.sigmoid.default", 1, {}}},
           {"mul(x0,x1)", "add(t0,1.5)", "sigmoid(t1)"}, 2);
}
// Llama's MLP gate, as the graph has it: x * sigmoid(x) * up
void BM_ChainSiluMul(benchmark::State& state) {
  RunChain(state,
           {{"aten.sigmoid.default", 1, {}}, {"aten.mul.Tensor", 2, {}},
            {"aten.mul.Tensor", 2, {}}},
           {"sigmoid(x0)", "mul(x0,t0)", "mul(t1,x1)"}, 2);
}
// Cheap ops only: relu(x * 0.5 + y)
void BM_ChainMulAddRelu(benchmark::State& state) {
  RunChain(state,
           {{"aten.mul.Tensor", 1, {FloatArg(0.5)}}, {"aten.add.Tensor", 2, {}},
            {"aten.relu.default", 1, {}}},
           {"mul(x0,0.5)", "add(t0,x1)", "relu(t1)"}, 2);
}
#define KILN_CHAIN_BENCH(fn)                                                         \
  BENCHMARK(fn)->ArgsProduct({{1 << 16, 1 << 20}, {0, 1}})->UseRealTime()->Unit( \
      benchmark::kMicrosecond)
KILN_CHAIN_BENCH(BM_ChainMulAddSigmoid);
KILN_CHAIN_BENCH(BM_ChainSiluMul);
KILN_CHAIN_BENCH(BM_ChainMulAddRelu);
#undef KILN_CHAIN_BENCH

}  // namespace
}  // namespace kiln::runtime
