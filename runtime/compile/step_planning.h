// Ordering a compiled graph's steps into waves and sharing their buffers:
// the schedule, convolutions that write over their residual, and cats
// whose inputs are written in place into their output.
#pragma once

#include <vector>

#include "runtime/compile/compiled_graph.h"
#include "runtime/ir/compile_options.h"
#include "runtime/ir/graph.h"
#include "runtime/plan/joined_in_place.h"
#include "runtime/plan/memory_plan.h"

namespace kiln::runtime {

// What the compiler knows about a step before it is scheduled: the arena
// requests it reads and writes, and the steps it reads from.
struct StepUse {
  std::vector<int> reads;   // requests of its inputs (repeats allowed)
  std::vector<int> writes;  // requests of its outputs
  std::vector<int> after;   // steps whose outputs it reads
};

// Puts cg->steps in execution order, grouped into waves (one step each
// without branches), and gives every request its time span in waves: a
// wave is one point in time, so values produced or read in the same wave
// never share bytes. Graph outputs live past the last wave (the copy-out).
// Steps of one wave get disjoint scratch.
void ScheduleSteps(BranchMode branches, const std::vector<StepUse>& uses,
                   const std::vector<int>& output_requests, CompiledGraph* cg,
                   std::vector<BufferRequest>* requests);

// Convolutions with a fused residual add write their output over the
// residual when nothing else reads it any more (plan/in_place.h); the
// kernel then skips copying the residual into its output. Returns each
// request's owner. Call after ScheduleSteps (lifetimes in waves).
std::vector<int> PlanInPlace(const Graph& graph, const CompiledGraph& cg,
                             const std::vector<std::vector<int>>& request_of,
                             const std::vector<int>& output_of_request,
                             std::vector<BufferRequest>* requests);

// Outputs a caller may lay over an input (Graph::outputs_over_inputs) may
// be computed in the caller's memory during the run (output_of_request)
// only by a step that overwrites that input (ops.def: Overwrites) and is
// its one reader: with the bytes shared, that step updates the input in
// place, having read nothing of it before. Any other such output is taken
// out of output_of_request: computed in the arena, it is copied over the
// input after the run, once nothing reads the input any more.
void KeepOutputsOverInputsSafe(const Graph& graph,
                               const std::vector<std::vector<int>>& request_of,
                               std::vector<int>* output_of_request);

// Cats whose inputs fill their output end to end (every dimension before
// the cat's is 1) become join candidates (plan/joined_in_place.h); those
// joined lose their step, since their inputs' producers then write the
// output. Call after PlanInPlace; returns the join plan, whose owners
// compose with the in-place ones.
JoinPlan PlanJoinedCats(const Graph& graph, const std::vector<std::vector<int>>& request_of,
                        const std::vector<int>& output_requests,
                        const std::vector<int>& in_place_owner, CompiledGraph* cg,
                        std::vector<BufferRequest>* requests);

}  // namespace kiln::runtime
