// The AVX-512 panel loop of SkinnyMatmul (skinny_matmul.h): one 16-float
// vector per row of a panel, so 8 rows need 8 accumulators where AVX2
// needs 16, and a product of up to 8 rows keeps up with memory. Built
// with AVX-512 enabled (runtime/CMakeLists.txt), called only after a CPU
// check; includes nothing compiled for AVX2 elsewhere (see
// small_gemm_avx512.cc).
#include <immintrin.h>

#include <cstdint>

namespace kiln::runtime::skinny_internal {
namespace {

constexpr int64_t kPanel = 16;
constexpr int64_t kPrefetchRows = 64;

// acc[r][0..16) += sum over k < kc of a[r * lda + k] * b[k][0..16), R rows
// at once, U rows of B per step with their own accumulators (R * U >= 4
// independent FMA chains).
template <int R>
inline void AccumulateRows(const float* a, int64_t lda, const float* b, int64_t kc,
                           float* acc) {
  constexpr int U = R >= 4 ? 1 : 4 / R;
  __m512 c[U][R];
  _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) {
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) c[u][r] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + U <= kc; k += U) {
    _Pragma("GCC unroll 8") for (int u = 0; u < U; ++u) {
      // With many rows the loop has too few loads in flight for the
      // hardware prefetcher to keep B streaming from memory on its own.
      if (R >= 4) {
        _mm_prefetch(reinterpret_cast<const char*>(b + (k + u + kPrefetchRows) * kPanel),
                     _MM_HINT_T0);
      }
      const __m512 bv = _mm512_load_ps(b + (k + u) * kPanel);
      _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
        c[u][r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + k + u]), bv, c[u][r]);
      }
    }
  }
  for (; k < kc; ++k) {
    const __m512 bv = _mm512_load_ps(b + k * kPanel);
    _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
      c[0][r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + k]), bv, c[0][r]);
    }
  }
  _Pragma("GCC unroll 8") for (int r = 0; r < R; ++r) {
    __m512 s = c[0][r];
    _Pragma("GCC unroll 8") for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, c[u][r]);
    _mm512_store_ps(acc + r * kPanel, _mm512_add_ps(_mm512_load_ps(acc + r * kPanel), s));
  }
}

}  // namespace

// Rows [0, m) of acc (m x 16, 64-byte aligned) += a[:, k0:k0+kc] @ the
// panel rows b[0..kc).
void AccumulatePanelAvx512(const float* a, int64_t lda, int64_t m, const float* b, int64_t kc,
                           float* acc) {
  int64_t r = 0;
  for (; r + 8 <= m; r += 8) AccumulateRows<8>(a + r * lda, lda, b, kc, acc + r * kPanel);
  if (r + 4 <= m) {
    AccumulateRows<4>(a + r * lda, lda, b, kc, acc + r * kPanel);
    r += 4;
  }
  if (r + 2 <= m) {
    AccumulateRows<2>(a + r * lda, lda, b, kc, acc + r * kPanel);
    r += 2;
  }
  if (r < m) AccumulateRows<1>(a + r * lda, lda, b, kc, acc + r * kPanel);
}

}  // namespace kiln::runtime::skinny_internal
