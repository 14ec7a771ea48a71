#include "runtime/kernels/post_op_loops.h"

#include <immintrin.h>

#include "runtime/kernels/vector_math.h"

namespace kiln::runtime {
namespace {

using alg = dnnl::algorithm;

using vmath::Relu6OfPlus3;
using vmath::StdMax;
using vmath::StdMin;

inline __m256 Apply(const PostOp& op, __m256 x) {
  switch (op.algorithm) {
    case alg::eltwise_relu:
      if (op.alpha == 0.f) return StdMax(x, _mm256_setzero_ps());
      // leaky: x > 0 ? x : x * alpha (NaN compares false: NaN * alpha).
      return _mm256_blendv_ps(_mm256_mul_ps(x, _mm256_set1_ps(op.alpha)), x,
                              _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
    case alg::eltwise_logistic:
      return vmath::Sigmoid(x);
    case alg::eltwise_swish:
      return vmath::Silu(x);
    case alg::eltwise_hardswish:
      return _mm256_div_ps(_mm256_mul_ps(x, Relu6OfPlus3(x)), _mm256_set1_ps(6.f));
    case alg::eltwise_hardsigmoid:
      return _mm256_div_ps(Relu6OfPlus3(x), _mm256_set1_ps(6.f));
    case alg::eltwise_gelu_erf:
      return vmath::GeluErf(x);
    case alg::eltwise_gelu_tanh:
      return vmath::GeluTanh(x);
    case alg::eltwise_clip_v2:
      return StdMin(StdMax(x, _mm256_set1_ps(op.alpha)), _mm256_set1_ps(op.beta));
    default:
      return x;  // excluded by LoopsImplement
  }
}

}  // namespace

bool LoopsImplement(const std::vector<PostOp>& ops) {
  for (const PostOp& op : ops) {
    if (op.kind != PostOp::Kind::kEltwise) return false;
    switch (op.algorithm) {
      case alg::eltwise_swish:
        if (op.alpha != 1.f) return false;
        break;
      case alg::eltwise_relu:
      case alg::eltwise_logistic:
      case alg::eltwise_hardswish:
      case alg::eltwise_hardsigmoid:
      case alg::eltwise_gelu_erf:
      case alg::eltwise_gelu_tanh:
      case alg::eltwise_clip_v2:
        break;
      default:
        return false;
    }
  }
  return true;
}

void ApplyPostOps(const std::vector<PostOp>& ops, float* data, int64_t n) {
  for (const PostOp& op : ops) {
    vmath::Map(data, data, n, [&op](__m256 x) { return Apply(op, x); });
  }
}

std::vector<PostOpRun> SplitPostOpRuns(std::vector<PostOp> ops) {
  std::vector<PostOpRun> runs;
  for (PostOp& op : ops) {
    if (op.kind == PostOp::Kind::kAdd) {
      runs.push_back(PostOpRun{true, {}});
      continue;
    }
    if (runs.empty() || runs.back().add) runs.emplace_back();
    runs.back().activations.push_back(std::move(op));
  }
  return runs;
}

void ApplyPostOpRuns(const std::vector<PostOpRun>& runs, float* data, const float* residual,
                     int64_t n) {
  for (const PostOpRun& run : runs) {
    if (!run.add) {
      ApplyPostOps(run.activations, data, n);
      continue;
    }
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(data + i, _mm256_add_ps(_mm256_loadu_ps(data + i),
                                               _mm256_loadu_ps(residual + i)));
    }
    for (; i < n; ++i) data[i] += residual[i];
  }
}

}  // namespace kiln::runtime
