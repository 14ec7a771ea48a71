#include "runtime/kernels/skinny_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/exec/parallel.h"
#include "runtime/kernels/post_op_loops.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;

// K is walked in chunks of this many rows, so that with several groups of
// rows a chunk of the panel (32 KiB) is read from memory once and from L1
// by the other groups.
constexpr int64_t kChunk = 128;

// Lanes [0, n) of two 8-float vectors, for 16 columns of which only n are
// B's (a row's end in the plain layout).
struct TailMasks {
  __m256i lo, hi;
  explicit TailMasks(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
    hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n) - 8), idx);
  }
};

// acc[r][0..16) += sum over k in [0, kc) of a[r * lda + k] * b[k * ldb][0..16),
// R rows at once (acc's rows kSkinnyPanel apart). U rows of B per step with
// their own accumulators, so that 2 * R * U = 8 independent FMA chains hide
// the FMA latency. Partial: only the lanes in `mask` are read.
template <int R, bool Partial>
inline void AccumulateRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc,
                           const TailMasks& mask, float* acc) {
  constexpr int U = 4 / R;
  auto load = [&](const float* p, int half) {
    if (Partial) return _mm256_maskload_ps(p + 8 * half, half == 0 ? mask.lo : mask.hi);
    return _mm256_loadu_ps(p + 8 * half);
  };
  __m256 c[U][R][2];
  for (int u = 0; u < U; ++u) {
    for (int r = 0; r < R; ++r) c[u][r][0] = c[u][r][1] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + U <= kc; k += U) {
    for (int u = 0; u < U; ++u) {
      const float* bk = b + (k + u) * ldb;
      const __m256 b0 = load(bk, 0), b1 = load(bk, 1);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_broadcast_ss(a + r * lda + k + u);
        c[u][r][0] = _mm256_fmadd_ps(x, b0, c[u][r][0]);
        c[u][r][1] = _mm256_fmadd_ps(x, b1, c[u][r][1]);
      }
    }
  }
  for (; k < kc; ++k) {
    const float* bk = b + k * ldb;
    const __m256 b0 = load(bk, 0), b1 = load(bk, 1);
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
    float* out = acc + r * kSkinnyPanel;
    _mm256_store_ps(out, _mm256_add_ps(_mm256_load_ps(out), s0));
    _mm256_store_ps(out + 8, _mm256_add_ps(_mm256_load_ps(out + 8), s1));
  }
}

template <bool Partial>
void AccumulateColumns16(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb,
                         int64_t kc, const TailMasks& mask, float* acc) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    AccumulateRows<4, Partial>(a + r * lda, lda, b, ldb, kc, mask, acc + r * kSkinnyPanel);
  }
  for (; r + 2 <= m; r += 2) {
    AccumulateRows<2, Partial>(a + r * lda, lda, b, ldb, kc, mask, acc + r * kSkinnyPanel);
  }
  for (; r < m; ++r) {
    AccumulateRows<1, Partial>(a + r * lda, lda, b, ldb, kc, mask, acc + r * kSkinnyPanel);
  }
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

void skinny_internal::AccumulatePanelAvx2(const float* a, int64_t lda, int64_t m, const float* b,
                                          int64_t ldb, int64_t width, bool padded, int64_t kc,
                                          float* acc) {
  for (int64_t j = 0; j < width; j += 16) {
    const int64_t columns = std::min<int64_t>(16, width - j);
    if (columns == 16 || padded) {
      AccumulateColumns16<false>(a, lda, m, b + j, ldb, kc, TailMasks(16), acc + j);
    } else {
      AccumulateColumns16<true>(a, lda, m, b + j, ldb, kc, TailMasks(columns), acc + j);
    }
  }
}

int64_t SkinnyMaxRows() { return HasAvx512() ? 8 : 2; }

bool SkinnyMatmul::Applies(int64_t m, int64_t k, int64_t n,
                           const std::vector<PostOp>& activations) {
  return m >= 1 && m <= SkinnyMaxRows() && k >= 1 && n >= 1 && k * n >= 4096 &&
         LoopsImplement(activations);
}

SkinnyMatmul SkinnyMatmul::Make(int64_t m, int64_t k, int64_t n, const memory::desc& b_md,
                                const void* b, const std::string& key) {
  SkinnyMatmul s;
  s.m = m;
  s.k = k;
  s.n = n;
  memory::desc packed_md;
  if (HasAvx512()) {
    // BA16a64b over [K, N]: panels of 64 columns (B), each of K rows
    // rounded up to 16 (A blocks of 16), rows of 64 floats.
    packed_md = memory::desc({k, n}, memory::data_type::f32, memory::format_tag::BA16a64b);
    s.layout.row_stride = kSkinnyPanel;
    s.layout.panel_stride = (k + 15) / 16 * 16 * kSkinnyPanel;
    s.layout.padded = true;
  } else {
    packed_md = memory::desc({k, n}, memory::data_type::f32, memory::format_tag::ab);
    s.layout.row_stride = n;
    s.layout.panel_stride = kSkinnyPanel;
    s.layout.padded = false;
  }
  s.packed = PackConstant(b_md, b, key, packed_md);
  return s;
}

void SkinnyMatmul::Run(const float* a, const float* addend, float* out) const {
  if (!constant_addend.empty()) addend = constant_addend.data();
  const int64_t count = (n + kSkinnyPanel - 1) / kSkinnyPanel;
  const float* packed_b = static_cast<const float*>(packed.memory.get_data_handle());
  const auto accumulate = HasAvx512() ? skinny_internal::AccumulatePanelAvx512
                                      : skinny_internal::AccumulatePanelAvx2;
  // Tasks of at least ~64 KiB of B: smaller ones cost more to hand out
  // than they take to read.
  const int64_t grain = std::max<int64_t>(1, (int64_t{16} << 10) / (k * kSkinnyPanel));
  ParallelFor(count, grain, [&](int64_t p0, int64_t p1) {
    alignas(64) float acc[kSkinnyMaxRowsAnyCpu * kSkinnyPanel];
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = packed_b + p * layout.panel_stride;
      const int64_t j0 = p * kSkinnyPanel;
      const int64_t width = std::min(kSkinnyPanel, n - j0);
      std::fill(acc, acc + m * kSkinnyPanel, 0.0f);
      for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
        accumulate(a + k0, k, m, panel + k0 * layout.row_stride, layout.row_stride, width,
                   layout.padded, std::min(kChunk, k - k0), acc);
      }
      for (int64_t r = 0; r < m; ++r) {
        float* row = acc + r * kSkinnyPanel;
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
