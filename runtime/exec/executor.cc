#include "runtime/exec/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_group.h>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "runtime/exec/arenas.h"
#include "runtime/exec/profile.h"

namespace kiln::runtime {
namespace {

std::atomic<int> g_requested_threads{0};

using Threading = CompiledGraph::Threading;

// A graph whose whole run takes less than this on one thread gains less
// from more threads than waking them costs: the request round trip alone is
// several times longer, and oneTBB workers spin for a while after each
// parallel region, burning a core that another client's run could use:
// a tiny CNN runs no faster on the arena's threads, and keeps the daemon
// busy on several cores for one client's calls.
constexpr int64_t kOneThreadBelowNs = 250'000;
// Warm runs on one thread before deciding (after a first, cold one: it
// touches the run's memory for the first time); a warm run this long
// decides at once, so a large graph spends little time on one thread.
constexpr int kCalibrationRuns = 3;
constexpr int64_t kClearlyLargeNs = 10 * kOneThreadBelowNs;

// Branches (auto): a wave runs its steps concurrently, one thread each,
// when each took under kConcurrentBelowNs on one thread in the calibration
// runs: small steps gain little from both threads (a parallel region's
// start and join cost about as much as its work), so two of them side by
// side finish sooner. A large step already keeps both threads busy. The
// rest of the wave must also be at least a third of its largest step:
// otherwise one thread idles while the other finishes the large one, and
// concurrency gains at most the small step's time. Waves whose
// second-largest step is under kConcurrentAboveNs have too little to
// overlap to pay for a task.
//
// The bounds come from timing chains of waves of two equal matrix products
// against the same chain in order: the gain shrinks as the products grow
// and is gone once one product fills both threads; a wave of a small
// product beside a much larger one (squeezenet's fire modules) gains
// nothing measurable.
constexpr int64_t kConcurrentBelowNs = 500'000;
constexpr int64_t kConcurrentAboveNs = 5'000;

// Keeps the fastest run of g; returns it (including this one).
int64_t RecordRun(const CompiledGraph& g, int64_t ns) {
  std::atomic<int64_t>& fastest_ns = g.threading.fastest_run_ns;
  int64_t fastest = fastest_ns.load();
  while (ns < fastest && !fastest_ns.compare_exchange_weak(fastest, ns)) {
  }
  return std::min(fastest, ns);
}

// Feeds a calibration run (one thread, `ns` long) into g's decision.
void RecordCalibrationRun(const CompiledGraph& g, int64_t ns, int64_t fastest) {
  Threading& t = g.threading;
  const int runs = t.calibration_runs.fetch_add(1) + 1;
  if (runs == 1) return;  // cold
  int decision = Threading::kUndecided;
  if (ns >= kClearlyLargeNs) {
    decision = Threading::kArena;
  } else if (runs > kCalibrationRuns) {
    decision = fastest < kOneThreadBelowNs ? Threading::kOneThread : Threading::kArena;
  }
  if (decision != Threading::kUndecided) {
    int expected = Threading::kUndecided;
    t.decision.compare_exchange_strong(expected, decision);
  }
}

std::unique_ptr<RunArena> TakeArena(const CompiledGraph& g) {
  {
    absl::MutexLock lock(&g.pool_mu);
    if (!g.pool.empty()) {
      auto a = std::move(g.pool.back());
      g.pool.pop_back();
      return a;
    }
  }
  return std::make_unique<RunArena>(g.TotalArenaBytes());
}

void ReturnArena(const CompiledGraph& g, std::unique_ptr<RunArena> a) {
  a->returned = std::chrono::steady_clock::now();
  absl::MutexLock lock(&g.pool_mu);
  g.pool.push_back(std::move(a));
}

void KeepFastest(std::atomic<int64_t>& fastest_ns, int64_t ns) {
  int64_t fastest = fastest_ns.load(std::memory_order_relaxed);
  while (ns < fastest && !fastest_ns.compare_exchange_weak(fastest, ns)) {
  }
}

}  // namespace

int64_t TrimIdleArenas(const CompiledGraph& g, std::chrono::steady_clock::duration idle) {
  const auto cutoff = std::chrono::steady_clock::now() - idle;
  std::vector<std::unique_ptr<RunArena>> freed;
  {
    absl::MutexLock lock(&g.pool_mu);
    // The pool is a stack (the latest returned is taken first), so the
    // front holds the arenas idle longest.
    size_t n = 0;
    while (g.pool.size() - n > 1 && g.pool[n]->returned < cutoff) ++n;
    for (size_t i = 0; i < n; ++i) freed.push_back(std::move(g.pool[i]));
    g.pool.erase(g.pool.begin(), g.pool.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return static_cast<int64_t>(freed.size()) * g.TotalArenaBytes();
}

bool RunsConcurrently(const CompiledGraph& g, const Wave& w) {
  if (w.size() < 2) return false;
  switch (g.options().branches) {
    case BranchMode::kOff:
      return false;
    case BranchMode::kOn:
      return true;
    case BranchMode::kAuto:
      break;
  }
  int64_t largest = 0, second = 0, total = 0;
  for (int s = w.begin; s < w.end; ++s) {
    // Unmeasured (max) counts as large.
    const int64_t ns = g.threading.step_ns[s].load(std::memory_order_relaxed);
    if (ns >= kConcurrentBelowNs) return false;
    total += ns;
    if (ns > largest) {
      second = largest;
      largest = ns;
    } else if (ns > second) {
      second = ns;
    }
  }
  return second >= kConcurrentAboveNs && 3 * (total - largest) >= largest;
}

namespace {

// One execution's view of where every value lives.
class RunState {
 public:
  RunState(const CompiledGraph& g, absl::Span<const void* const> inputs,
           absl::Span<void* const> outputs, uint8_t* base)
      : g_(g), inputs_(inputs), outputs_(outputs), base_(base) {}

  void* Address(const ValueRef& ref) const {
    const ValueSlot& slot = g_.slots[ref.node][ref.output];
    switch (slot.kind) {
      case ValueSlot::Kind::kInput:
        return const_cast<void*>(inputs_[slot.index]);
      case ValueSlot::Kind::kConstant:
        return const_cast<uint8_t*>(g_.constants[slot.index].bytes.get());
      case ValueSlot::Kind::kArena:
        return base_ + slot.offset;
      case ValueSlot::Kind::kOutput:
        return outputs_[slot.index];
    }
    return nullptr;
  }

  // Runs step s; `timed`: records its time as a calibration (one-thread)
  // run of it. Safe to call for different steps of a wave at once.
  absl::Status RunStep(int s, bool profile, bool timed) const {
    const CompiledStep& step = g_.steps[s];
    const Node& node = g_.graph.nodes[step.node];
    absl::InlinedVector<TensorView, 4> in_views, out_views;
    for (const ValueRef& ref : step.inputs) {
      in_views.push_back({Address(ref), &g_.graph.MetaOf(ref)});
    }
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      out_views.push_back({Address({step.node, o}), &node.outputs[o]});
    }
    KernelContext ctx{in_views, out_views, base_ + g_.arena_bytes + step.scratch_offset};
    const bool clock = profile || timed;
    const auto start = clock ? std::chrono::steady_clock::now()
                             : std::chrono::steady_clock::time_point();
    absl::Status status = step.kernel->Run(ctx);
    if (clock) {
      const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
      if (profile) RecordStep(node.target, node.name, ns);
      if (timed) KeepFastest(g_.threading.step_ns[s], ns);
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrCat("node '", node.name, "' (", node.target,
                                                      "): ", status.message()));
    }
    return absl::OkStatus();
  }

  // Runs wave w's steps side by side as tasks of the current arena; the
  // first failing step (in step order) is the result.
  absl::Status RunConcurrently(const Wave& w, bool profile) const {
    absl::InlinedVector<absl::Status, 4> status(w.size());
    oneapi::tbb::task_group tasks;
    for (int s = w.begin + 1; s < w.end; ++s) {
      tasks.run([this, &status, s, w, profile] { status[s - w.begin] = RunStep(s, profile, false); });
    }
    status[0] = RunStep(w.begin, profile, false);
    tasks.wait();
    for (absl::Status& st : status) {
      if (!st.ok()) return std::move(st);
    }
    return absl::OkStatus();
  }

 private:
  const CompiledGraph& g_;
  absl::Span<const void* const> inputs_;
  absl::Span<void* const> outputs_;
  uint8_t* base_;
};

}  // namespace

void ConfigureThreads(int num_threads) { g_requested_threads = num_threads; }

int ConfiguredThreads() {
  const int n = g_requested_threads.load();
  return n > 0 ? n : oneapi::tbb::info::default_concurrency();
}

ArenaChoice ArenaFor(const CompileOptions& options) {
  if (options.hint == ExecutionHint::kThroughput) return {1, /*shared=*/false};
  const int cap = ConfiguredThreads();
  return {options.num_threads > 0 ? std::min(options.num_threads, cap) : cap,
          /*shared=*/true};
}

void RunLikeExecution(const CompileOptions& options, absl::FunctionRef<void()> fn) {
  const ArenaChoice where = ArenaFor(options);
  RunInArena(where.concurrency, where.shared, fn);
}

bool RunsShort(const CompiledGraph& g) {
  return g.threading.fastest_run_ns.load() < kOneThreadBelowNs;
}

ArenaChoice ChooseArena(const CompiledGraph& g) {
  const ArenaChoice where = ArenaFor(g.options());
  if (!where.shared || where.concurrency == 1) return where;
  // Until decided (the first runs), and for small graphs: one thread, in
  // an arena of its own.
  return g.threading.decision.load() == Threading::kArena ? where : ArenaChoice{1, false};
}

absl::Status Execute(const CompiledGraph& g,
                     absl::Span<const void* const> inputs,
                     absl::Span<void* const> outputs, bool keep_warm) {
  if (inputs.size() != g.input_metas.size() ||
      outputs.size() != g.output_metas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "graph takes ", g.input_metas.size(), " inputs and ",
        g.output_metas.size(), " outputs; got ", inputs.size(), " and ",
        outputs.size()));
  }
  std::unique_ptr<RunArena> arena = TakeArena(g);
  if (arena->data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot allocate ", g.TotalArenaBytes(), " bytes for a run"));
  }
  const RunState run(g, inputs, outputs, arena->data);
  absl::Status status;
  const bool profile = ProfilingEnabled();
  const ArenaChoice where = ChooseArena(g);
  const bool calibrating = g.threading.decision.load() == Threading::kUndecided &&
                           ArenaFor(g.options()).concurrency > 1 && ArenaFor(g.options()).shared;
  // Calibration runs are on one thread: they time each step alone, for
  // RunsConcurrently.
  const bool time_steps = calibrating && g.options().branches == BranchMode::kAuto;
  const bool concurrent = where.concurrency > 1 && g.options().branches != BranchMode::kOff;
  const auto start = std::chrono::steady_clock::now();
  RunInArena(where.concurrency, where.shared, [&] {
    for (const Wave& w : g.waves) {
      if (concurrent && RunsConcurrently(g, w)) {
        status = run.RunConcurrently(w, profile);
        if (!status.ok()) return;
        continue;
      }
      for (int s = w.begin; s < w.end; ++s) {
        status = run.RunStep(s, profile, time_steps);
        if (!status.ok()) return;
      }
    }
    // Outputs computed in place (ValueSlot::kOutput) are there already.
    // memmove: an output laid over an input (Graph::outputs_over_inputs)
    // may be another input, which may overlap it.
    for (size_t i = 0; i < g.graph.outputs.size(); ++i) {
      const void* value = run.Address(g.graph.outputs[i]);
      if (value == outputs[i]) continue;
      std::memmove(outputs[i], value, static_cast<size_t>(g.output_metas[i].ByteSize()));
    }
  }, keep_warm);
  if (status.ok()) {
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count();
    const int64_t fastest = RecordRun(g, ns);
    if (calibrating) RecordCalibrationRun(g, ns, fastest);
  }
  ReturnArena(g, std::move(arena));
  return status;
}

}  // namespace kiln::runtime
