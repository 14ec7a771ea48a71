// How a graph is compiled and run: the runtime config a client passes as
// torch.compile(m, backend="kiln", options={"config": {...}}), which arrives
// as CompileRequest.options. The raw map is part of the cache key, so graphs
// compiled with different options never share an entry.
//
// It lives beside the IR because the graph carries it (Graph::options, like
// XLA's HloModuleConfig): prepare functions, passes and the executor all
// see the options of the graph they work on.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::runtime {

enum class ExecutionHint {
  // One execute may use every thread of the graph's arena.
  kLatency,
  // Each execute runs on one thread, so concurrent executes (several
  // clients) run side by side instead of splitting the same threads.
  kThroughput,
};

enum class Precision {
  kF32,
  // Convolutions and matrix products compute in bf16 (f32 accumulation);
  // every tensor at a node's boundary stays f32.
  kBf16,
};

// Whether independent steps of a graph (branches: the expand convolutions
// of a squeezenet fire module, the q/k/v projections of attention) run at
// the same time, each on its own thread of the graph's arena
// (compile/compiler.cc groups them into waves, exec/executor.cc runs them).
enum class BranchMode {
  // Every step runs alone, in graph order.
  kOff,
  // A wave runs concurrently when its steps are small enough that one
  // thread each beats both threads on each step in turn (measured in the
  // graph's first runs).
  kAuto,
  // Every wave of two or more steps runs concurrently (for tests and
  // comparisons).
  kOn,
};

// How activations between convolutions are laid out
// (passes/channels_last.cc).
enum class LayoutOption {
  // The layout this CPU's convolution kernels are fastest in: channels-last
  // on AVX-512, and on AVX2 the 8-channel blocked layout for graphs where
  // it pays (see the pass).
  kAuto,
  // Every op reads and writes NCHW, for comparisons.
  kNchw,
  // Force channels-last (NHWC) or blocked (nChw8c) activations, for tests
  // and measurements.
  kNhwc,
  kBlocked,
};

// Upper bound for num_threads: far above any core count this runs on, low
// enough that a typo cannot ask oneTBB for a million-slot arena.
inline constexpr int kMaxNumThreads = 256;

struct CompileOptions {
  // Threads of the arena the graph runs in; 0: the daemon's --threads.
  int num_threads = 0;
  ExecutionHint hint = ExecutionHint::kLatency;
  Precision precision = Precision::kF32;
  // precision "auto": bf16 where this CPU computes it natively
  // (NativeBf16), f32 elsewhere; `precision` holds the choice.
  bool precision_auto = false;
  // Layout propagation (passes/channels_last.cc): the layout activations
  // between convolutions stay in.
  LayoutOption layout = LayoutOption::kAuto;
  BranchMode branches = BranchMode::kOff;

  bool operator==(const CompileOptions& o) const {
    return num_threads == o.num_threads && hint == o.hint && precision == o.precision &&
           layout == o.layout && branches == o.branches;
  }
  bool operator!=(const CompileOptions& o) const { return !(*this == o); }
};

// Whether this CPU has bf16 dot products (AVX512-BF16 or AMX-BF16): where
// it does not, bf16 compute would be emulated and slower than f32.
bool NativeBf16();

// Parses CompileRequest.options. Keys: num_threads (1..kMaxNumThreads),
// hint (latency | throughput), precision (f32 | bf16 | auto), layout (auto |
// nchw | nhwc | blocked), branches (off | auto | on); absent keys keep their defaults. INVALID_ARGUMENT naming the key and the valid values for
// an unknown key or a bad value.
absl::StatusOr<CompileOptions> ParseCompileOptions(
    const std::map<std::string, std::string>& options);

// "num_threads=1 hint=throughput precision=bf16 ..." (num_threads=default
// for 0).
std::string CompileOptionsString(const CompileOptions& options);
std::string BranchModeName(BranchMode mode);

}  // namespace kiln::runtime
