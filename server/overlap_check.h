// Refuses calls whose output tensors share bytes with an input or with
// another output.
//
// A run writes its outputs while it reads its inputs (and, with parallel
// branches, while other nodes read them): an output laid over an input
// would let a graph rewrite what it reads mid-run, indices it has checked
// included. Spans are compared by the object they lie in, not by region id:
// one /dev/shm object registered twice (or under two names) is one object.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace kiln::server {

// Bytes [start, end) of a shared-memory object that one tensor of a call
// occupies. `object` identifies the object (device and inode).
struct TensorSpan {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  bool output = false;
  int index = 0;  // position among the call's inputs or outputs
};

// An output that may lie exactly over an input (the graph's
// outputs_over_inputs): positions among the call's outputs and inputs.
struct OutputOverInput {
  int output = 0;
  int input = 0;
};

// OK when no output overlaps an input or another output (inputs may
// overlap each other; empty tensors overlap nothing), except that an output
// of `may_coincide` may cover exactly its input's bytes, neither more nor
// less. INVALID_ARGUMENT naming the two tensors otherwise. Reorders `spans`.
absl::Status CheckOutputsDisjoint(absl::Span<TensorSpan> spans,
                                  absl::Span<const OutputOverInput> may_coincide = {});

}  // namespace kiln::server
