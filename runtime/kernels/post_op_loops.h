// Elementwise post-ops (kernels/post_ops.h) applied by Kiln's own loops,
// for kernels that compute without oneDNN (skinny_matmul.h) and so cannot
// hand the chain to a primitive. Results follow ATen's formulas, as the
// unfused activation kernels compute them (NaN passes through relu and
// clip; the transcendental ones come from vector_math.h).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/kernels/post_ops.h"

namespace kiln::runtime {

// Whether every op of `ops` is an activation these loops implement (no
// "add": that one reads a tensor).
bool LoopsImplement(const std::vector<PostOp>& ops);

// data[i] = ops applied in order to data[i], for i in [0, n).
// LoopsImplement(ops) must hold.
void ApplyPostOps(const std::vector<PostOp>& ops, float* data, int64_t n);

// A post-op chain as the loops apply it: residual adds, and the runs of
// activations between them (applied together, one pass over the data).
struct PostOpRun {
  bool add = false;
  std::vector<PostOp> activations;
};

// `ops` as runs; each op is an "add" or one LoopsImplement takes.
std::vector<PostOpRun> SplitPostOpRuns(std::vector<PostOp> ops);

// data[i] = runs applied in order to data[i], for i in [0, n); an add
// adds residual[i]. residual must not overlap data.
void ApplyPostOpRuns(const std::vector<PostOpRun>& runs, float* data, const float* residual,
                     int64_t n);

}  // namespace kiln::runtime
