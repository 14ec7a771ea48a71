// Runs compiled graphs. The executor owns the runtime's threads: every
// execution runs in a oneTBB task arena (exec/arenas.h) chosen by the
// graph's compile options, and oneDNN runs on the same oneTBB, in the same
// arena, so no execution brings a thread pool of its own.
//
//   hint latency (default): the shared arena of num_threads threads
//     (default and cap: the daemon's --threads); one execute may use all of
//     them, concurrent executes of that size split them. Except for small
//     graphs: the first runs of a graph (up to four) go on one thread, and
//     a graph whose fastest such run took under 250 us keeps running on one
//     thread (in an arena of its own), since waking more threads costs it
//     more than they save and takes cores from other clients.
//   hint throughput: each execute gets a one-thread arena of its own, so
//     concurrent executes (clients) run side by side, one core each.
//
// Steps run wave by wave (CompiledGraph::waves). A wave of several
// independent steps (compile option branches) runs them as concurrent tasks
// of the arena when it has two or more threads and RunsConcurrently says
// so; otherwise in order, each step free to use every thread.
#pragma once

#include <chrono>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

// Sets the daemon's thread count (0: all cores): the arena size of graphs
// that ask for none, and the most any graph gets. Call before the first
// Execute.
void ConfigureThreads(int num_threads);
int ConfiguredThreads();

// Where executions of a graph compiled with `options` run.
struct ArenaChoice {
  int concurrency = 1;
  bool shared = true;  // see RunInArena
};
ArenaChoice ArenaFor(const CompileOptions& options);

// Runs fn where executions of a graph compiled with `options` run. Compile
// inside it, so oneDNN sizes each primitive's work split for the threads
// it will actually get.
void RunLikeExecution(const CompileOptions& options, absl::FunctionRef<void()> fn);

// Where the next execution of g runs: ArenaFor(g.options()), or one thread
// of its own for a small graph (or while deciding whether g is small).
ArenaChoice ChooseArena(const CompiledGraph& g);

// Whether runs of g in an arena of two or more threads run wave w's steps
// concurrently: never for one step or branches off, always for branches
// on; for branches auto, when the calibration runs (the first, one-thread
// runs) found each step small (see executor.cc).
bool RunsConcurrently(const CompiledGraph& g, const Wave& w);

// True once a run of g has taken under 250 us: short enough to run on a
// thread that must not block for long (gRPC's callback threads).
bool RunsShort(const CompiledGraph& g);

// Frees the graph's pooled run arenas, except one, that no run has taken
// for `idle`: concurrent runs grow the pool to one arena each, and a burst
// should not hold its peak for the graph's lifetime. Returns the bytes
// freed. Thread-safe.
int64_t TrimIdleArenas(const CompiledGraph& graph, std::chrono::steady_clock::duration idle);

// Runs `graph` with `inputs[i]` pointing at dense data of input_metas[i] and
// `outputs[i]` at room for output_metas[i]. Thread-safe; the caller has
// bounds-checked every pointer. keep_warm = false: the threads that ran
// it sleep right after rather than spinning for the next run (RunInArena),
// when the caller knows its client computes next.
absl::Status Execute(const CompiledGraph& graph,
                     absl::Span<const void* const> inputs,
                     absl::Span<void* const> outputs, bool keep_warm = true);

}  // namespace kiln::runtime
