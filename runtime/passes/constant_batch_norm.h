// Inference batch norms whose statistics and affine parameters are all
// constants: per channel c an affine map x * scale(c) + shift(c). Folded
// into the convolution before them (FoldBatchNorm) or, after an
// activation, applied by it as a post-op (FuseConvPostOps).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "runtime/passes/pass_context.h"

namespace kiln::runtime {

struct ConstantBatchNorm {
  ValueRef input;
  int64_t channels = 0;
  const float* gamma = nullptr;  // null: 1
  const float* beta = nullptr;   // null: 0
  const float* mean = nullptr;
  const float* var = nullptr;
  double eps = 0;

  // In double; callers round once.
  double Scale(int64_t c) const {
    return (gamma ? gamma[c] : 1.0) / std::sqrt(static_cast<double>(var[c]) + eps);
  }
  double Beta(int64_t c) const { return beta ? beta[c] : 0.0; }
  // The constants' bytes, for CheckBeforeRead (gamma and beta may be null).
  std::array<const float*, 4> Data() const { return {gamma, beta, mean, var}; }
};

// Node `b` as a constant inference batch norm over dim 1 of its input:
// aten._native_batch_norm_legit_no_training or aten.native_batch_norm with
// training false, no kwargs, its saved statistics (outputs 1 and 2) unused,
// and every tensor parameter a constant f32 of the input's channel count.
std::optional<ConstantBatchNorm> MatchConstantBatchNorm(const PassContext& ctx, const Uses& uses,
                                                        int b);

// Tensor argument `pos` of `node` when it is a constant of `numel` f32
// values, else null.
const float* ConstantF32Arg(const PassContext& ctx, const Node& node, int pos, int64_t numel);

// What a derived constant is computed from, for its share key
// (compile/shared_constants.h): `kind`, eps, and the share key and shape of
// each tensor argument (node, position) named; "none" for an absent one.
// Empty when one of them has no share key.
std::string DerivationRecipe(const PassContext& ctx, const std::string& kind, double eps,
                             std::initializer_list<std::pair<const Node*, int>> tensors);

}  // namespace kiln::runtime
