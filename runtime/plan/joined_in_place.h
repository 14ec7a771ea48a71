// Concatenations without a copy: when a cat's inputs lie one after another
// in its output (every dimension before the cat's is 1: a batch-1 cat of
// channels in NCHW or the blocked layout, squeezenet's fire modules), each
// input can be computed straight into its part of the output, and the cat
// has nothing left to do. At batch 1 squeezenet1_1 spent about 8% of its
// run in its eight cats (KILN_PROFILE=nodes).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/plan/memory_plan.h"

namespace kiln::runtime {

// A cat whose inputs, in order, fill its output end to end.
struct JoinCandidate {
  int output = -1;               // the cat's request
  std::vector<int> pieces;       // its inputs' requests
  std::vector<int64_t> offsets;  // each input's byte offset in the output
};

struct JoinPlan {
  // Per request: the request whose bytes it lives in and where in them
  // (itself and 0 when not joined); composes with ShareInPlace's owners.
  std::vector<int> owner;
  std::vector<int64_t> offset_in_owner;
  // Per candidate: whether its inputs now live in its output.
  std::vector<bool> joined;
};

// Decides which cats need no copy and merges their inputs' requests into
// the output's: a joined input's bytes become 0 and the output's lifetime
// grows to cover its inputs' (from the earliest one's first wave to the
// latest read of any). Call after ShareInPlace (`in_place_owner` is its
// result): requests that already share bytes are left alone.
//
// The graph is functional, so an input may have other readers: its bytes
// stay as written for as long as the output's bytes live. A cat is joined
// only when every input qualifies: it is no graph output (`pinned`),
// neither lives in nor holds another request's bytes, appears once in the
// cat and in no other joined cat, and starts at a kPlanAlignment multiple
// (kernels see the alignment an arena buffer of their own would have); and
// the output is no graph output and shares no bytes in place either (a
// convolution writing over it after its last read would overwrite inputs
// read later).
JoinPlan ShareJoined(const std::vector<JoinCandidate>& candidates,
                     const std::vector<bool>& pinned,
                     const std::vector<int>& in_place_owner,
                     std::vector<BufferRequest>* requests);

}  // namespace kiln::runtime
