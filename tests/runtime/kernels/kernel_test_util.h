// Test harness for one op: builds a one-node Graph (inputs, constants, the
// op), calls the registry's prepare function, allocates buffers and runs the
// kernel. Plus random data and a tolerance check against double-precision
// references the tests compute themselves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/kernel.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/registry.h"
#include "tests/testing/random_floats.h"

namespace kiln::runtime::testing {

// Literal arguments: the factories of runtime/ir/arg_builders.h.

inline TensorMeta F32(std::vector<int64_t> shape) {
  return TensorMeta{DType::kF32, std::move(shape)};
}

// ---- Data -----------------------------------------------------------------

inline int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// 64-byte aligned, owned byte buffer (oneDNN and the executor align so).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes) : size_(bytes) {
    const size_t alloc = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    data_.reset(static_cast<char*>(std::aligned_alloc(64, alloc)));
  }
  char* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

// ---- The harness ----------------------------------------------------------

class OpTester {
 public:
  explicit OpTester(std::string target) : target_(std::move(target)) {}

  // Adds a graph input holding `data` (f32) and returns a reference to it.
  Arg Input(const TensorMeta& meta, const std::vector<float>& data) {
    return AddValue(Node::Kind::kInput, meta, data.data(),
                    data.size() * sizeof(float));
  }
  // Same as Input, for any element type: `bytes` raw bytes.
  Arg RawInput(const TensorMeta& meta, const void* bytes, size_t size) {
    return AddValue(Node::Kind::kInput, meta, bytes, size);
  }
  // Adds a graph constant (its data is visible to prepare).
  Arg Constant(const TensorMeta& meta, const std::vector<float>& data) {
    return AddValue(Node::Kind::kConstant, meta, data.data(),
                    data.size() * sizeof(float));
  }

  void AddArg(Arg a) { args_.push_back(std::move(a)); }
  void AddKwarg(std::string name, Arg a) {
    kwargs_.push_back(NamedArg{std::move(name), std::move(a)});
  }
  void SetArgs(std::vector<Arg> args) { args_ = std::move(args); }
  // Compile options prepare sees (default: f32, latency).
  void SetOptions(const CompileOptions& options) { options_ = options; }

  // Builds the graph and calls the op's prepare function.
  absl::Status Prepare() {
    const int index = FindOp(target_);
    if (index < 0) return absl::NotFoundError("unknown op " + target_);
    graph_ = Graph();
    std::vector<const void*> constant_data;
    for (size_t i = 0; i < values_.size(); ++i) {
      graph_.nodes.push_back(values_[i].node);
      constant_data.push_back(values_[i].node.kind == Node::Kind::kConstant
                                  ? values_[i].data.data()
                                  : nullptr);
      if (values_[i].node.kind == Node::Kind::kInput) ++graph_.num_inputs;
    }
    Node op;
    op.kind = Node::Kind::kOp;
    op.name = "node_under_test";
    op.target = target_;
    op.op_index = index;
    op.args = args_;
    op.kwargs = kwargs_;
    graph_.nodes.push_back(std::move(op));
    constant_data.push_back(nullptr);
    Node& node = graph_.nodes.back();
    NodeArgs node_args(graph_, node, constant_data, /*shape_only=*/false, options_);
    absl::StatusOr<PreparedOp> prepared = AllOps()[index].prepare(node_args);
    if (!prepared.ok()) return prepared.status();
    if (prepared->kernel == nullptr) {
      return absl::InternalError("prepare returned no kernel");
    }
    outputs_meta_ = prepared->outputs;
    node.outputs = outputs_meta_;
    kernel_ = std::move(prepared->kernel);
    return absl::OkStatus();
  }

  const std::vector<TensorMeta>& output_metas() const { return outputs_meta_; }
  const Kernel& kernel() const { return *kernel_; }

  // Allocates outputs (poisoned with NaN bytes so unwritten elements show)
  // and scratch, then runs the kernel.
  absl::Status Run() {
    outputs_.clear();
    for (const TensorMeta& m : outputs_meta_) {
      outputs_.emplace_back(static_cast<size_t>(m.ByteSize()));
      std::memset(outputs_.back().data(), 0xff, outputs_.back().size());
    }
    return RunInto(outputs_);
  }

  // Runs with caller-provided output buffers (for concurrency tests).
  absl::Status RunInto(std::vector<AlignedBuffer>& outputs) const {
    std::vector<TensorView> in_views;
    for (const ValueRef& ref : TensorInputsOf(graph_.nodes.back())) {
      const Value& v = values_[ref.node];
      in_views.push_back(TensorView{v.data.data(),
                                    &v.node.outputs[0]});
    }
    std::vector<TensorView> out_views;
    for (size_t i = 0; i < outputs.size(); ++i) {
      out_views.push_back(TensorView{outputs[i].data(), &outputs_meta_[i]});
    }
    // No scratch pointer at all when none is requested: kernels must cope.
    const size_t scratch_bytes = kernel_->ScratchBytes();
    AlignedBuffer scratch(scratch_bytes);
    KernelContext ctx;
    ctx.inputs = in_views;
    ctx.outputs = out_views;
    ctx.scratch = scratch_bytes > 0 ? scratch.data() : nullptr;
    return kernel_->Run(ctx);
  }

  std::vector<float> OutputF32(int i) const {
    const int64_t n = outputs_meta_[i].NumElements();
    std::vector<float> v(n);
    if (n > 0) std::memcpy(v.data(), outputs_[i].data(), n * sizeof(float));
    return v;
  }
  // A c64 output as interleaved (real, imaginary) floats.
  std::vector<float> OutputC64(int i) const {
    const int64_t n = outputs_meta_[i].NumElements();
    std::vector<float> v(2 * n);
    if (n > 0) std::memcpy(v.data(), outputs_[i].data(), 2 * n * sizeof(float));
    return v;
  }
  // Bool outputs, one 0/1 byte per element.
  std::vector<uint8_t> OutputBool(int i) const {
    const int64_t n = outputs_meta_[i].NumElements();
    std::vector<uint8_t> v(n);
    if (n > 0) std::memcpy(v.data(), outputs_[i].data(), n);
    return v;
  }
  std::vector<int64_t> OutputI64(int i) const {
    const int64_t n = outputs_meta_[i].NumElements();
    std::vector<int64_t> v(n);
    if (n > 0) std::memcpy(v.data(), outputs_[i].data(), n * sizeof(int64_t));
    return v;
  }

 private:
  struct Value {
    Node node;
    AlignedBuffer data;
  };
  Arg AddValue(Node::Kind kind, const TensorMeta& meta, const void* bytes,
               size_t size) {
    Value v;
    v.node.kind = kind;
    v.node.name = absl::StrCat("value", values_.size());
    if (kind == Node::Kind::kInput) v.node.input_index = num_inputs_++;
    v.node.outputs.push_back(meta);
    v.data = AlignedBuffer(size);
    if (size > 0) std::memcpy(v.data.data(), bytes, size);
    values_.push_back(std::move(v));
    return TensorArg(ValueRef{static_cast<int>(values_.size()) - 1, 0});
  }

  std::string target_;
  std::vector<Value> values_;
  int num_inputs_ = 0;
  std::vector<Arg> args_;
  std::vector<NamedArg> kwargs_;
  CompileOptions options_;
  Graph graph_;
  std::vector<TensorMeta> outputs_meta_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<AlignedBuffer> outputs_;
};

// ---- Checks ---------------------------------------------------------------

// Every element within atol + rtol * |expected|; NaN must match NaN and
// an infinity the same infinity.
inline ::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                           const std::vector<double>& expected,
                                           double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected " << expected.size();
  }
  int bad = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const bool ok = std::isnan(e)
                        ? std::isnan(a)
                        : a == e ||  // also equal infinities
                              std::abs(a - e) <= atol + rtol * std::abs(e);
    if (!ok) {
      if (bad == 0) result = ::testing::AssertionFailure();
      if (bad < 5) {
        result << "element " << i << ": got " << a << ", expected " << e
               << "\n";
      }
      ++bad;
    }
  }
  if (bad > 0) result << bad << " of " << actual.size() << " elements differ";
  return result;
}

// Runs `kernel` on `inputs` with its one output over the last input's bytes
// (plan/in_place.h lets a step that adds a residual write over it).
inline absl::Status RunOverLastInput(const Kernel& kernel, absl::Span<const TensorView> inputs) {
  const TensorView outputs[] = {inputs.back()};
  AlignedBuffer scratch(kernel.ScratchBytes());
  KernelContext ctx;
  ctx.inputs = inputs;
  ctx.outputs = outputs;
  ctx.scratch = scratch.data();
  return kernel.Run(ctx);
}

// NCHW -> NHWC of a [n, c, hw] tensor.
template <typename T>
std::vector<T> ToNhwc(const std::vector<T>& x, int64_t n, int64_t c, int64_t hw) {
  std::vector<T> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) y[(i * hw + p) * c + k] = x[(i * c + k) * hw + p];
  return y;
}

inline std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Expects `status` to be INVALID_ARGUMENT naming the node under test and
// containing `fragment`.
inline ::testing::AssertionResult IsInvalidArgument(
    const absl::Status& status, const std::string& fragment) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure()
           << "expected INVALID_ARGUMENT, got " << status;
  }
  const std::string msg(status.message());
  if (msg.find("node 'node_under_test'") == std::string::npos ||
      msg.find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message '" << msg << "' lacks the node name or '" << fragment
           << "'";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::runtime::testing
