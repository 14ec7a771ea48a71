// In-place outputs: a step whose output is one of its inputs with some
// elements replaced or added to (ops.def: Overwrites; a convolution's
// residual, which oneDNN's sum post-op accumulates into the destination; a
// scatter's self) can write into that input's bytes when nothing reads
// them afterwards. Without this the kernel first copies the residual into its
// output: at batch 8 a 25.7 MB memcpy per resnet50 bottleneck in the
// 56x56 stage, about a fifth of the convolution's own time.
#pragma once

#include <vector>

#include "runtime/plan/memory_plan.h"

namespace kiln::runtime {

// A step that may write its output request over its `input` request.
struct InPlaceCandidate {
  int wave = 0;                  // when the step runs
  int output = -1;               // the request it writes
  int input = -1;                // the request it may overwrite
  std::vector<int> other_reads;  // requests of its other inputs
};

// Decides which candidates may run in place and merges their requests:
// returns, per request, the request whose bytes it lives in (itself when
// not merged). A merged output's bytes become 0 and its owner's lifetime
// grows to cover it, so PlanMemory places one buffer for both; the caller
// then gives the output its owner's offset.
//
// A candidate is taken when its input's bytes (following earlier merges)
// are read in its wave by it alone, once, and by nothing after it (which
// also rules out graph outputs, live past the last wave), and the two
// requests are the same size. `reads_in_wave[w]`: every request read by a
// step of wave w, once per read. Candidates are taken in wave order.
std::vector<int> ShareInPlace(const std::vector<InPlaceCandidate>& candidates,
                              const std::vector<std::vector<int>>& reads_in_wave,
                              std::vector<BufferRequest>* requests);

}  // namespace kiln::runtime
