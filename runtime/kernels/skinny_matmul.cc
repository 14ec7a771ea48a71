#include "runtime/kernels/skinny_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/exec/parallel.h"
#include "runtime/kernels/post_op_loops.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kPanel = 16;  // columns per panel: two AVX2 vectors
// K is walked in chunks of this many rows, so that with several groups of
// rows the chunk of B (16 KiB) is read from memory once and from L1 by the
// other groups.
constexpr int64_t kChunk = 256;

// acc[r][0..16) += sum over k in [0, kc) of a[r * lda + k] * b[k][0..16),
// for R rows at once. U rows of B per step with their own accumulators,
// so that 2 * R * U = 8 independent FMA chains hide the FMA latency.
template <int R>
inline void AccumulateRows(const float* a, int64_t lda, const float* b, int64_t kc,
                           float* acc) {
  constexpr int U = 4 / R;
  __m256 c[U][R][2];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < R; ++r) c[u][r][0] = c[u][r][1] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + U <= kc; k += U) {
    for (int u = 0; u < U; ++u) {
      const float* bk = b + (k + u) * kPanel;
      const __m256 b0 = _mm256_load_ps(bk), b1 = _mm256_load_ps(bk + 8);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_broadcast_ss(a + r * lda + k + u);
        c[u][r][0] = _mm256_fmadd_ps(x, b0, c[u][r][0]);
        c[u][r][1] = _mm256_fmadd_ps(x, b1, c[u][r][1]);
      }
    }
  }
  for (; k < kc; ++k) {
    const float* bk = b + k * kPanel;
    const __m256 b0 = _mm256_load_ps(bk), b1 = _mm256_load_ps(bk + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + k);
      c[0][r][0] = _mm256_fmadd_ps(x, b0, c[0][r][0]);
      c[0][r][1] = _mm256_fmadd_ps(x, b1, c[0][r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 s0 = c[0][r][0], s1 = c[0][r][1];
    for (int u = 1; u < U; ++u) {
      s0 = _mm256_add_ps(s0, c[u][r][0]);
      s1 = _mm256_add_ps(s1, c[u][r][1]);
    }
    float* out = acc + r * kPanel;
    _mm256_store_ps(out, _mm256_add_ps(_mm256_load_ps(out), s0));
    _mm256_store_ps(out + 8, _mm256_add_ps(_mm256_load_ps(out + 8), s1));
  }
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

void skinny_internal::AccumulatePanelAvx2(const float* a, int64_t lda, int64_t m, const float* b,
                                          int64_t kc, float* acc) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) AccumulateRows<4>(a + r * lda, lda, b, kc, acc + r * kPanel);
  for (; r + 2 <= m; r += 2) AccumulateRows<2>(a + r * lda, lda, b, kc, acc + r * kPanel);
  for (; r < m; ++r) AccumulateRows<1>(a + r * lda, lda, b, kc, acc + r * kPanel);
}

int64_t SkinnyMaxRows() { return HasAvx512() ? 8 : 2; }

bool SkinnyMatmul::Applies(int64_t m, int64_t k, int64_t n,
                           const std::vector<PostOp>& activations) {
  return m >= 1 && m <= SkinnyMaxRows() && k >= 1 && n >= 1 && k * n >= 4096 &&
         LoopsImplement(activations);
}

SkinnyMatmul SkinnyMatmul::Make(int64_t m, int64_t k, int64_t n, const dnnl::memory::desc& b_md,
                                const void* b, const std::string& key) {
  SkinnyMatmul s;
  s.m = m;
  s.k = k;
  s.n = n;
  s.k_padded = (k + kPanel - 1) / kPanel * kPanel;
  // BA16a16b over [K, N]: panels of 16 columns (B), each K rows (A blocks
  // of 16) of 16 floats; padding (K and N up to multiples of 16) is zero.
  const dnnl::memory::desc panels_md({k, n}, dnnl::memory::data_type::f32,
                                     dnnl::memory::format_tag::BA16a16b);
  s.panels = PackConstant(b_md, b, key, panels_md);
  return s;
}

void SkinnyMatmul::Run(const float* a, const float* addend, float* out) const {
  const int64_t count = (n + kPanel - 1) / kPanel;
  const float* packed = static_cast<const float*>(panels.memory.get_data_handle());
  // Tasks of at least ~64 KiB of B: smaller ones cost more to hand out
  // than they take to read.
  const int64_t grain = std::max<int64_t>(1, (int64_t{16} << 10) / (k_padded * kPanel));
  const auto accumulate = HasAvx512() ? skinny_internal::AccumulatePanelAvx512
                                       : skinny_internal::AccumulatePanelAvx2;
  ParallelFor(count, grain, [&](int64_t p0, int64_t p1) {
    alignas(64) float acc[kSkinnyMaxRowsAnyCpu * kPanel];
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = packed + p * k_padded * kPanel;
      std::fill(acc, acc + m * kPanel, 0.0f);
      for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
        const int64_t kc = std::min(kChunk, k - k0);
        const float* b = panel + k0 * kPanel;
        accumulate(a + k0, k, m, b, kc, acc);
      }
      const int64_t j0 = p * kPanel;
      const int64_t width = std::min(kPanel, n - j0);
      for (int64_t r = 0; r < m; ++r) {
        float* row = acc + r * kPanel;
        if (has_addend) {
          const float* add = addend + r * addend_row_stride + j0 * addend_col_stride;
          for (int64_t j = 0; j < width; ++j) row[j] += add[j * addend_col_stride];
        }
        if (!activations.empty()) ApplyPostOps(activations, row, width);
        std::memcpy(out + r * n + j0, row, width * sizeof(float));
      }
    }
  });
}

}  // namespace kiln::runtime
