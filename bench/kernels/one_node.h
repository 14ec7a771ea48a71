// The benchmarks' harness for one op: a graph of inputs/constants and one
// op node prepared through the op registry, with 64-byte aligned buffers,
// whose kernel Run() then times.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/kernel.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/registry.h"

namespace kiln::bench {

// One op node over f32 (or c64) inputs/constants. Not thread-safe.
class OneNode {
 public:
  explicit OneNode(std::string target) : target_(std::move(target)) {}

  // A tensor argument filled with uniform values in [lo, hi): f32, or c64
  // with both parts drawn so.
  runtime::Arg Tensor(std::vector<int64_t> shape, bool constant, float lo = -1, float hi = 1,
                      runtime::DType dtype = runtime::DType::kF32) {
    runtime::Node n;
    n.kind = constant ? runtime::Node::Kind::kConstant : runtime::Node::Kind::kInput;
    n.outputs.push_back(runtime::TensorMeta{dtype, std::move(shape)});
    buffers_.push_back(Alloc(n.outputs[0].ByteSize()));
    std::mt19937 gen(buffers_.size());
    std::uniform_real_distribution<float> dist(lo, hi);
    float* p = static_cast<float*>(buffers_.back().get());
    const int64_t floats = n.outputs[0].ByteSize() / static_cast<int64_t>(sizeof(float));
    for (int64_t i = 0; i < floats; ++i) p[i] = dist(gen);
    graph_.nodes.push_back(std::move(n));
    return runtime::TensorArg(runtime::ValueRef{static_cast<int>(graph_.nodes.size()) - 1, 0});
  }

  bool Prepare(std::vector<runtime::Arg> args, benchmark::State& state) {
    runtime::Node op;
    op.name = "bench";
    op.target = target_;
    op.op_index = runtime::FindOp(target_);
    op.args = std::move(args);
    std::vector<const void*> constants;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      constants.push_back(graph_.nodes[i].kind == runtime::Node::Kind::kConstant
                              ? buffers_[i].get()
                              : nullptr);
    }
    graph_.nodes.push_back(std::move(op));
    constants.push_back(nullptr);
    runtime::NodeArgs node_args(graph_, graph_.nodes.back(), constants);
    absl::StatusOr<runtime::PreparedOp> p =
        runtime::AllOps()[runtime::FindOp(target_)].prepare(node_args);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      return false;
    }
    outputs_meta_ = p->outputs;
    kernel_ = std::move(p->kernel);
    for (const runtime::ValueRef& ref : runtime::TensorInputsOf(graph_.nodes.back())) {
      inputs_.push_back(
          runtime::TensorView{buffers_[ref.node].get(), &graph_.MetaOf(ref)});
    }
    for (const runtime::TensorMeta& m : outputs_meta_) {
      out_buffers_.push_back(Alloc(m.ByteSize()));
      outputs_.push_back(runtime::TensorView{out_buffers_.back().get(), &m});
    }
    scratch_ = Alloc(kernel_->ScratchBytes());
    return true;
  }

  bool Run(benchmark::State& state) {
    runtime::KernelContext ctx;
    ctx.inputs = inputs_;
    ctx.outputs = outputs_;
    ctx.scratch = scratch_.get();
    absl::Status s = kernel_->Run(ctx);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    return s.ok();
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<void, Free>;
  static Buffer Alloc(int64_t bytes) {
    return Buffer(std::aligned_alloc(64, (std::max<int64_t>(bytes, 1) + 63) /
                                             64 * 64));
  }

  std::string target_;
  runtime::Graph graph_;
  std::vector<Buffer> buffers_, out_buffers_;
  Buffer scratch_;
  std::vector<runtime::TensorMeta> outputs_meta_;
  std::unique_ptr<runtime::Kernel> kernel_;
  std::vector<runtime::TensorView> inputs_, outputs_;
};

}  // namespace kiln::bench
