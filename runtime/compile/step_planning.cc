#include "runtime/compile/step_planning.h"

#include <algorithm>
#include <atomic>
#include <limits>

#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/registry.h"
#include "runtime/ops/op_table.h"
#include "runtime/plan/in_place.h"
#include "runtime/plan/waves.h"

namespace kiln::runtime {

// Puts cg->steps in execution order, grouped into waves (one step each
// without branches), and gives every request its time span in waves: a
// wave is one point in time, so values produced or read in the same wave
// never share bytes. Graph outputs live past the last wave (the copy-out).
// Steps of one wave get disjoint scratch.
void ScheduleSteps(BranchMode branches, const std::vector<StepUse>& uses,
                   const std::vector<int>& output_requests, CompiledGraph* cg,
                   std::vector<BufferRequest>* requests) {
  std::vector<std::vector<int>> after;
  after.reserve(uses.size());
  for (const StepUse& u : uses) after.push_back(u.after);
  WaveLimits limits;
  if (branches == BranchMode::kOff) limits.lookahead = 0;
  const WavePlan plan = PlanWaves(after, limits);

  std::vector<CompiledStep> steps(cg->steps.size());
  for (BufferRequest& r : *requests) r.first = r.last = -1;
  cg->scratch_bytes = 0;
  for (int w = 0; w < plan.num_waves(); ++w) {
    int64_t scratch = 0;
    for (int i = plan.begin[w]; i < plan.begin[w + 1]; ++i) {
      const int s = plan.order[i];
      for (int r : uses[s].reads) (*requests)[r].last = std::max((*requests)[r].last, w);
      for (int r : uses[s].writes) {
        (*requests)[r].first = w;
        (*requests)[r].last = std::max((*requests)[r].last, w);
      }
      steps[i] = std::move(cg->steps[s]);
      steps[i].scratch_offset = scratch;
      scratch += (static_cast<int64_t>(steps[i].kernel->ScratchBytes()) + kPlanAlignment - 1) /
                 kPlanAlignment * kPlanAlignment;
    }
    cg->scratch_bytes = std::max(cg->scratch_bytes, scratch);
    cg->waves.push_back({plan.begin[w], plan.begin[w + 1]});
  }
  for (int r : output_requests) (*requests)[r].last = plan.num_waves();
  cg->steps = std::move(steps);
  cg->threading.step_ns = std::vector<std::atomic<int64_t>>(cg->steps.size());
  for (auto& ns : cg->threading.step_ns) ns = std::numeric_limits<int64_t>::max();
}

// Ops that overwrite an input (ops.def: Overwrites; a convolution's
// fused residual, a slice_scatter's self) write their output over it when
// nothing else reads it any more (plan/in_place.h); the kernel then skips
// copying it into its output. Returns each request's owner. Call after
// ScheduleSteps (lifetimes in waves).
std::vector<int> PlanInPlace(const Graph& graph, const CompiledGraph& cg,
                             const std::vector<std::vector<int>>& request_of,
                             const std::vector<int>& output_of_request,
                             std::vector<BufferRequest>* requests) {
  std::vector<std::vector<int>> reads_in_wave(cg.waves.size());
  std::vector<InPlaceCandidate> candidates;
  for (size_t w = 0; w < cg.waves.size(); ++w) {
    for (int i = cg.waves[w].begin; i < cg.waves[w].end; ++i) {
      const CompiledStep& step = cg.steps[i];
      for (const ValueRef& ref : step.inputs) {
        reads_in_wave[w].push_back(request_of[ref.node][ref.output]);
      }
      const Node& node = graph.nodes[step.node];
      const OpDef* op = node.kind == Node::Kind::kOp ? OpOf(node) : nullptr;
      const int pos = op != nullptr ? op->traits.overwrites : -1;
      if (pos < 0 || static_cast<size_t>(pos) >= node.args.size() ||
          node.args[pos].kind != Arg::Kind::kTensor || node.outputs.size() != 1) {
        continue;
      }
      const ValueRef overwritten = node.args[pos].tensor;
      InPlaceCandidate c;
      c.wave = static_cast<int>(w);
      c.output = request_of[step.node][0];
      c.input = request_of[overwritten.node][overwritten.output];
      if (c.output < 0 || c.input < 0 || output_of_request[c.output] >= 0) continue;
      bool skipped = false;  // the overwritten input's own read, once
      for (const ValueRef& ref : step.inputs) {
        if (!skipped && ref == overwritten) {
          skipped = true;
          continue;
        }
        c.other_reads.push_back(request_of[ref.node][ref.output]);
      }
      candidates.push_back(std::move(c));
    }
  }
  return ShareInPlace(candidates, reads_in_wave, requests);
}

namespace {

// Whether node `n` overwrites input `input` (ops.def: Overwrites) and is
// the one reader of it, graph outputs included.
bool OverwritesItsOnlyReader(const Graph& graph, int n, int input) {
  const Node& node = graph.nodes[n];
  const OpDef* op = node.kind == Node::Kind::kOp ? OpOf(node) : nullptr;
  const int pos = op != nullptr ? op->traits.overwrites : -1;
  const int input_node = InputNode(graph, input);
  if (pos < 0 || static_cast<size_t>(pos) >= node.args.size() ||
      node.args[pos].kind != Arg::Kind::kTensor || node.outputs.size() != 1 ||
      node.args[pos].tensor.node != input_node) {
    return false;
  }
  int reads = 0;
  for (const Node& other : graph.nodes) {
    if (other.dead) continue;
    for (const ValueRef& ref : TensorInputsOf(other)) reads += ref.node == input_node;
  }
  for (const ValueRef& out : graph.outputs) reads += out.node == input_node;
  return reads == 1;
}

}  // namespace

void KeepOutputsOverInputsSafe(const Graph& graph,
                               const std::vector<std::vector<int>>& request_of,
                               std::vector<int>* output_of_request) {
  for (const OutputOverInput& pair : graph.outputs_over_inputs) {
    const ValueRef out = graph.outputs[pair.output];
    const int r = request_of[out.node][out.output];
    if (r < 0 || (*output_of_request)[r] != pair.output) continue;  // copied after the run
    if (!OverwritesItsOnlyReader(graph, out.node, pair.input)) (*output_of_request)[r] = -1;
  }
}

// Cats whose inputs fill their output end to end (every dimension before
// the cat's is 1) become join candidates (plan/joined_in_place.h); those
// joined lose their step, since their inputs' producers then write the
// output. Call after PlanInPlace; returns the join plan, whose owners
// compose with the in-place ones.
JoinPlan PlanJoinedCats(const Graph& graph, const std::vector<std::vector<int>>& request_of,
                        const std::vector<int>& output_requests,
                        const std::vector<int>& in_place_owner, CompiledGraph* cg,
                        std::vector<BufferRequest>* requests) {
  std::vector<bool> pinned(requests->size(), false);
  for (int r : output_requests) pinned[r] = true;
  std::vector<JoinCandidate> candidates;
  std::vector<int> candidate_step;
  // KILN_JOIN_CATS=0 keeps every cat's copy, for comparisons (read per
  // compile, so tests can compare the two).
  const bool join_cats = KernelSwitchOn("KILN_JOIN_CATS");
  for (size_t s = 0; join_cats && s < cg->steps.size(); ++s) {
    const Node& node = graph.nodes[cg->steps[s].node];
    if (node.target != "aten.cat.default" || node.outputs.size() != 1) continue;
    const TensorMeta& out = node.outputs[0];
    int64_t dim = 0;
    if (node.args.size() > 1 && node.args[1].kind == Arg::Kind::kInt) dim = node.args[1].i;
    for (const NamedArg& a : node.kwargs) {
      if (a.name == "dim" && a.value.kind == Arg::Kind::kInt) dim = a.value.i;
    }
    if (dim < 0) dim += out.rank();
    if (dim < 0 || dim >= out.rank()) continue;
    bool leading_ones = true;
    for (int64_t d = 0; d < dim; ++d) leading_ones = leading_ones && out.shape[d] == 1;
    if (!leading_ones) continue;
    JoinCandidate c;
    c.output = request_of[cg->steps[s].node][0];
    int64_t offset = 0;
    for (const ValueRef& ref : cg->steps[s].inputs) {
      c.pieces.push_back(request_of[ref.node][ref.output]);
      c.offsets.push_back(offset);
      offset += graph.MetaOf(ref).ByteSize();
    }
    if (offset != out.ByteSize()) continue;  // e.g. a skipped 1-D empty input
    candidates.push_back(std::move(c));
    candidate_step.push_back(static_cast<int>(s));
  }
  JoinPlan plan = ShareJoined(candidates, pinned, in_place_owner, requests);
  std::vector<bool> drop(cg->steps.size(), false);
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (!plan.joined[k]) continue;
    drop[candidate_step[k]] = true;
    cg->joined_cats.push_back(cg->steps[candidate_step[k]].node);
  }
  if (cg->joined_cats.empty()) return plan;
  std::vector<CompiledStep> steps;
  std::vector<Wave> waves;
  for (const Wave& w : cg->waves) {
    Wave kept{static_cast<int>(steps.size()), static_cast<int>(steps.size())};
    for (int s = w.begin; s < w.end; ++s) {
      if (!drop[s]) steps.push_back(std::move(cg->steps[s]));
    }
    kept.end = static_cast<int>(steps.size());
    if (kept.size() > 0) waves.push_back(kept);
  }
  cg->steps = std::move(steps);
  cg->waves = std::move(waves);
  cg->threading.step_ns = std::vector<std::atomic<int64_t>>(cg->steps.size());
  for (auto& ns : cg->threading.step_ns) ns = std::numeric_limits<int64_t>::max();
  return plan;
}

}  // namespace kiln::runtime
