#include "runtime/exec/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>

#include <oneapi/tbb/info.h>

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
// parallel region, burning a core that another client's run could use.
// Measured on 2 cores: a tiny CNN runs in ~100 us either way, and with the
// arena's threads the daemon used 1.2 cores at 1 client instead of 0.4.
constexpr int64_t kOneThreadBelowNs = 250'000;
// Warm runs on one thread before deciding (after a first, cold one: it
// touches the run's memory for the first time); a warm run this long
// decides at once, so a large graph spends little time on one thread.
constexpr int kCalibrationRuns = 3;
constexpr int64_t kClearlyLargeNs = 10 * kOneThreadBelowNs;

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
  absl::MutexLock lock(&g.pool_mu);
  g.pool.push_back(std::move(a));
}

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
                     absl::Span<void* const> outputs) {
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
  uint8_t* base = arena->data;
  auto address = [&](const ValueRef& ref) -> void* {
    const ValueSlot& slot = g.slots[ref.node][ref.output];
    switch (slot.kind) {
      case ValueSlot::Kind::kInput:
        return const_cast<void*>(inputs[slot.index]);
      case ValueSlot::Kind::kConstant:
        return const_cast<uint8_t*>(g.constants[slot.index].bytes.get());
      case ValueSlot::Kind::kArena:
        return base + slot.offset;
    }
    return nullptr;
  };

  absl::Status status;
  const bool profile = ProfilingEnabled();
  const ArenaChoice where = ChooseArena(g);
  const bool calibrating = g.threading.decision.load() == Threading::kUndecided &&
                           ArenaFor(g.options()).concurrency > 1 && ArenaFor(g.options()).shared;
  const auto start = std::chrono::steady_clock::now();
  RunInArena(where.concurrency, where.shared, [&] {
    std::vector<TensorView> in_views, out_views;
    for (const CompiledStep& step : g.steps) {
      const Node& node = g.graph.nodes[step.node];
      in_views.clear();
      out_views.clear();
      for (const ValueRef& ref : step.inputs) {
        in_views.push_back({address(ref), &g.graph.MetaOf(ref)});
      }
      for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
        out_views.push_back({address({step.node, o}), &node.outputs[o]});
      }
      KernelContext ctx{in_views, out_views, base + g.arena_bytes};
      const auto step_start = profile ? std::chrono::steady_clock::now()
                                      : std::chrono::steady_clock::time_point();
      status = step.kernel->Run(ctx);
      if (profile) {
        RecordStep(node.target, node.name, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - step_start)
                                    .count());
      }
      if (!status.ok()) {
        status = absl::Status(status.code(),
                              absl::StrCat("node '", node.name, "' (", node.target,
                                           "): ", status.message()));
        return;
      }
    }
    for (size_t i = 0; i < g.graph.outputs.size(); ++i) {
      const ValueRef& ref = g.graph.outputs[i];
      std::memcpy(outputs[i], address(ref),
                  static_cast<size_t>(g.output_metas[i].ByteSize()));
    }
  });
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
