// A compiled subgraph: the validated graph with inferred metas, one prepared
// kernel per op node, and a static memory plan. Produced by Compile()
// (compile/compiler.h), run by Execute() (exec/executor.h).
//
// Immutable after compilation, so any number of threads may execute it at
// once; the only shared mutable state is the pool of per-run arenas, which
// is guarded by its own mutex, and what the executor learns about the
// graph's run time (atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "runtime/compile/constant_data.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/kernel.h"

namespace kiln::runtime {

// Where a tensor value lives during a run.
struct ValueSlot {
  // kOutput: a graph output computed straight into the caller's output
  // memory (see Compile), with the values that alias it.
  enum class Kind { kInput, kConstant, kArena, kOutput };
  Kind kind = Kind::kArena;
  int index = 0;       // kInput / kOutput: position; kConstant: constants index
  int64_t offset = 0;  // kArena: byte offset in the arena
};

struct CompiledStep {
  int node = 0;  // index into graph.nodes
  std::unique_ptr<Kernel> kernel;
  std::vector<ValueRef> inputs;  // the node's tensor inputs, in kernel order
  // Its ScratchBytes() in the run's scratch (after the planned
  // intermediates), apart from every other step of its wave.
  int64_t scratch_offset = 0;
};

// Steps [begin, end) of CompiledGraph::steps: mutually independent, so they
// may run at the same time (plan/waves.h). Without branches (the option),
// every wave is one step.
struct Wave {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// A 64-byte aligned block for one run's intermediates and scratch; the
// constructor throws std::bad_alloc when there is no memory for it.
struct RunArena {
  explicit RunArena(int64_t bytes);
  ~RunArena();
  RunArena(const RunArena&) = delete;
  RunArena& operator=(const RunArena&) = delete;
  const size_t size;  // bytes at data (util/large_alloc.h)
  uint8_t* data = nullptr;
  // When its last run finished: pooled arenas idle long enough are freed
  // (exec/executor.h, TrimIdleArenas).
  std::chrono::steady_clock::time_point returned{};
};

struct CompiledGraph {
  Graph graph;  // metas of every node output filled in
  std::vector<CompiledStep> steps;  // in execution order
  std::vector<Wave> waves;          // covering `steps` in order
  // Cat nodes whose inputs were computed in their output's bytes: no step
  // (plan/joined_in_place.h).
  std::vector<int> joined_cats;
  std::vector<std::vector<ValueSlot>> slots;  // [node][output]
  // By ValueSlot::index (non-owning); null for those no run reads (their
  // bytes went into kernels at prepare time and were let go).
  std::vector<ConstantData> constants;
  // Owners of the constant bytes runs read: the client's (from the
  // constant store) and those compile passes created (folded weights).
  std::vector<ConstantData> owned_constants;
  std::vector<TensorMeta> input_metas;
  std::vector<TensorMeta> output_metas;
  int64_t arena_bytes = 0;    // planned intermediates
  // Kernel scratch, after the arena: the most any wave's steps need
  // together.
  int64_t scratch_bytes = 0;

  // Where the compile spent its time (ms), for logs: resolving constants,
  // the shape sweep, passes, kernel preparation (primitives, packing) and
  // scheduling plus the memory plan.
  struct Phases {
    double constants_ms = 0, shapes_ms = 0, passes_ms = 0, kernels_ms = 0, plan_ms = 0;
  };
  Phases phases;

  // Arenas of finished runs, reused by later ones.
  mutable absl::Mutex pool_mu;
  mutable std::vector<std::unique_ptr<RunArena>> pool;

  // Whether executions use their arena's threads, decided by the executor
  // from the first runs (exec/executor.cc, ChooseArena), and the fastest
  // run so far (RunsShort).
  struct Threading {
    enum Decision { kUndecided = 0, kOneThread = 1, kArena = 2 };
    std::atomic<int> decision{kUndecided};
    std::atomic<int> calibration_runs{0};
    std::atomic<int64_t> fastest_run_ns{std::numeric_limits<int64_t>::max()};
    // Per step: its fastest time in the one-thread calibration runs, which
    // decides whether a wave runs concurrently (branches auto). Sized by
    // the compiler.
    std::vector<std::atomic<int64_t>> step_ns;
  };
  mutable Threading threading;

  int64_t TotalArenaBytes() const { return arena_bytes + scratch_bytes; }
  // The options it was compiled with (threads, hint, precision).
  const CompileOptions& options() const { return graph.options; }
};

}  // namespace kiln::runtime
