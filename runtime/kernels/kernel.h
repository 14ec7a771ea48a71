// The interface between the executor and a prepared kernel.
//
// A Kernel is created once per graph node at compile time by the op's
// prepare function (ops/op_def.h), which validates the node, infers its
// output metas and does all per-node work that does not depend on input
// values (weight prepacking, primitive creation). Run() is then called for
// every execution; it must be safe to call concurrently from several threads
// with different buffers (kernels keep no per-run state in members, and get
// scratch memory from the executor).
//
// Kernels never create threads: they describe parallel work with
// exec::ParallelFor, and the executor decides where it runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/ir/tensor_meta.h"

namespace kiln::runtime {

// A dense, contiguous tensor in memory the executor owns or has bound.
struct TensorView {
  void* data = nullptr;
  const TensorMeta* meta = nullptr;

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

struct KernelContext {
  // The node's tensor inputs in argument order (see TensorInputsOf).
  absl::Span<const TensorView> inputs;
  absl::Span<const TensorView> outputs;
  // ScratchBytes() bytes, 64-byte aligned, private to this run.
  void* scratch = nullptr;

  // Input `index` as f32 data, or nullptr for an absent optional input
  // (index -1, as InputIndex gives it).
  const float* OptionalF32(int index) const {
    return index >= 0 ? inputs[index].as<const float>() : nullptr;
  }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Bytes of per-run scratch memory Run() needs.
  virtual size_t ScratchBytes() const { return 0; }
  // Inputs were validated at prepare time; errors here are internal faults.
  virtual absl::Status Run(const KernelContext& ctx) const = 0;
};

}  // namespace kiln::runtime
