// The AVX2 tiles of SmallGemm, and the dispatch to AVX-512.
#include "runtime/microkernels/small_gemm.h"

#include <immintrin.h>

namespace kiln::runtime {
namespace {

constexpr int kRows = 6;  // 6 x 16 tile: 12 accumulators, 2 B vectors, 1 broadcast

// Lanes [0, n) of two 8-float vectors, for a tile narrower than 16.
struct TailMasks {
  __m256i lo, hi;
  explicit TailMasks(int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
    hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n) - 8), idx);
  }
};

// One tile: R rows, 16 columns (the first `width` of them when Partial).
template <int R, bool Partial>
inline void Tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                 int64_t ldc, bool accumulate, const TailMasks& mask) {
  __m256 acc[R][2];
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    if (accumulate) {
      acc[r][0] = Partial ? _mm256_maskload_ps(c + r * ldc, mask.lo) : _mm256_loadu_ps(c + r * ldc);
      acc[r][1] = Partial ? _mm256_maskload_ps(c + r * ldc + 8, mask.hi)
                          : _mm256_loadu_ps(c + r * ldc + 8);
    } else {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    const __m256 b0 = Partial ? _mm256_maskload_ps(bp, mask.lo) : _mm256_loadu_ps(bp);
    const __m256 b1 = Partial ? _mm256_maskload_ps(bp + 8, mask.hi) : _mm256_loadu_ps(bp + 8);
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r * lda + p);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    if (Partial) {
      _mm256_maskstore_ps(c + r * ldc, mask.lo, acc[r][0]);
      _mm256_maskstore_ps(c + r * ldc + 8, mask.hi, acc[r][1]);
    } else {
      _mm256_storeu_ps(c + r * ldc, acc[r][0]);
      _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
  }
}

template <bool Partial>
void Rows(int64_t rows, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, bool accumulate, const TailMasks& mask) {
  switch (rows) {
    case 1: return Tile<1, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 2: return Tile<2, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 3: return Tile<3, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 4: return Tile<4, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 5: return Tile<5, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    default: return Tile<6, Partial>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
  }
}

}  // namespace

namespace small_gemm_internal {

void SmallGemmAvx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, int64_t strip_stride, float* c, int64_t ldc, bool accumulate) {
  const TailMasks full(16), tail(n % 16);
  for (int64_t j = 0; j < n; j += 16) {
    const bool partial = n - j < 16;
    const float* bj = b + j / 16 * strip_stride;
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t rows = m - i < kRows ? m - i : kRows;
      if (partial) {
        Rows<true>(rows, k, a + i * lda, lda, bj, ldb, c + i * ldc + j, ldc, accumulate, tail);
      } else {
        Rows<false>(rows, k, a + i * lda, lda, bj, ldb, c + i * ldc + j, ldc, accumulate, full);
      }
    }
  }
}

}  // namespace small_gemm_internal

namespace {

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

void SmallGemmStrips(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int64_t strip_stride, float* c, int64_t ldc,
                     bool accumulate) {
  if (m <= 0 || n <= 0) return;
  if (HasAvx512()) {
    small_gemm_internal::SmallGemmAvx512(m, n, k, a, lda, b, ldb, strip_stride, c, ldc,
                                         accumulate);
  } else {
    small_gemm_internal::SmallGemmAvx2(m, n, k, a, lda, b, ldb, strip_stride, c, ldc, accumulate);
  }
}

void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  SmallGemmStrips(m, n, k, a, lda, b, ldb, kSmallGemmStrip, c, ldc, accumulate);
}

}  // namespace kiln::runtime
