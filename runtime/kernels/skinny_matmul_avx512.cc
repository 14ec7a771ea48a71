// The AVX-512 panel loop of SkinnyMatmul (skinny_matmul.h): a row of a
// 64-column panel is four 16-float vectors, so R rows of A keep 4R
// accumulators. Rows go 6 at a time (24 accumulators, 4 of B and a
// broadcast fit the 32 registers), then 4, 2, 1: 8 rows are two passes
// over the panel's chunk (6 + 2) rather than 4 + 4, and keep up with
// memory. No software prefetch: asking for B's rows ahead made these
// loops slower, at 1 to 8 rows, with the weight out of cache (bench/
// kernels BM_LinearCold, e.g. 8/512/32000).
// Built with AVX-512 enabled (runtime/CMakeLists.txt), called only after
// a CPU check; see skinny_panel.h for what it may include.
#include <immintrin.h>

#include <cstdint>

#include "runtime/kernels/skinny_panel.h"

namespace kiln::runtime::skinny_internal {
namespace {

// acc[r][0..16 V) += sum over k < kc of a[r * lda + k] * b[k * ldb][0..16 V),
// R rows at once (acc's rows kSkinnyPanel apart). U rows of B per step
// with their own accumulators keep R * V * U >= 4 FMA chains going.
template <int R, int V>
inline void AccumulateRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t kc,
                           float* acc) {
  constexpr int U = R * V >= 4 ? 1 : 4 / (R * V);
  __m512 c[U][R][V];
  _Pragma("GCC unroll 16") for (int u = 0; u < U; ++u) {
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) c[u][r][v] = _mm512_setzero_ps();
    }
  }
  auto step = [&](int u, int64_t k) {
    const float* bk = b + k * ldb;
    __m512 bv[V];
    _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) {
      bv[v] = _mm512_loadu_ps(bk + 16 * v);
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + k]);
      _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) {
        c[u][r][v] = _mm512_fmadd_ps(x, bv[v], c[u][r][v]);
      }
    }
  };
  int64_t k = 0;
  for (; k + U <= kc; k += U) {
    _Pragma("GCC unroll 4") for (int u = 0; u < U; ++u) step(u, k + u);
  }
  for (; k < kc; ++k) step(0, k);
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    _Pragma("GCC unroll 4") for (int v = 0; v < V; ++v) {
      __m512 s = c[0][r][v];
      _Pragma("GCC unroll 4") for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, c[u][r][v]);
      float* out = acc + r * kSkinnyPanel + 16 * v;
      _mm512_store_ps(out, _mm512_add_ps(_mm512_load_ps(out), s));
    }
  }
}

template <int V>
void Rows(const float* a, int64_t lda, int64_t m, const float* b, int64_t ldb, int64_t kc,
          float* acc) {
  int64_t r = 0;
  for (; r + 6 <= m; r += 6) {
    AccumulateRows<6, V>(a + r * lda, lda, b, ldb, kc, acc + r * kSkinnyPanel);
  }
  for (; r + 4 <= m; r += 4) {
    AccumulateRows<4, V>(a + r * lda, lda, b, ldb, kc, acc + r * kSkinnyPanel);
  }
  if (r + 2 <= m) {
    AccumulateRows<2, V>(a + r * lda, lda, b, ldb, kc, acc + r * kSkinnyPanel);
    r += 2;
  }
  if (r < m) AccumulateRows<1, V>(a + r * lda, lda, b, ldb, kc, acc + r * kSkinnyPanel);
}

}  // namespace

void AccumulatePanelAvx512(const float* a, int64_t lda, int64_t m, const float* b, int64_t width,
                           int64_t kc, float* acc) {
  // Whole vectors: the panel is zero past `width`.
  constexpr int64_t ldb = kSkinnyPanel;
  switch ((width + 15) / 16) {
    case 1: return Rows<1>(a, lda, m, b, ldb, kc, acc);
    case 2: return Rows<2>(a, lda, m, b, ldb, kc, acc);
    case 3: return Rows<3>(a, lda, m, b, ldb, kc, acc);
    default: return Rows<4>(a, lda, m, b, ldb, kc, acc);
  }
}

}  // namespace kiln::runtime::skinny_internal
