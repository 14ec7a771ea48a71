// Groups a compiled graph's steps into waves of mutually independent steps
// (no step reads another's output in the same wave), so the executor may
// run a wave's steps at the same time. Planned once at compile time, before
// the memory plan, which then treats each wave as one point in time: no
// two values live in the same wave share bytes.
//
// Order is kept close to the graph's own (which the memory plan was tuned
// for): a wave starts at the first step not yet scheduled and takes in
// later steps only from a short look-ahead window, only if everything they
// read was produced by an earlier wave. Steps passed over keep their order.
#pragma once

#include <vector>

namespace kiln::runtime {

struct WavePlan {
  // Step indices in execution order; wave w is order[begin[w], begin[w+1]).
  std::vector<int> order;
  std::vector<int> begin;  // one more entry than there are waves

  int num_waves() const { return static_cast<int>(begin.size()) - 1; }
};

struct WaveLimits {
  // Later steps (not yet scheduled) looked at for each wave; 0 puts every
  // step in a wave of its own, in the given order.
  int lookahead = 8;
  // Most steps in one wave: more than the threads that can run them only
  // adds live memory.
  int max_steps = 4;
};

// `reads[s]`: the steps whose outputs step s reads (each less than s: the
// steps are in a topological order). The result is a topological order
// too.
WavePlan PlanWaves(const std::vector<std::vector<int>>& reads, const WaveLimits& limits);

}  // namespace kiln::runtime
