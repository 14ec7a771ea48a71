// The AVX-512 tiles of SmallGemm (small_gemm.h). This file alone is
// compiled with AVX-512 enabled (runtime/CMakeLists.txt) and is reached
// only through SmallGemm's check of the CPU; it includes nothing that
// other files compile for AVX2 only (their inline functions would get an
// AVX-512 copy here that the linker could pick for everyone).
#include <immintrin.h>

#include "runtime/microkernels/small_gemm.h"

namespace kiln::runtime::small_gemm_internal {
namespace {

// 12 rows x 32 columns (two strips): 24 accumulators, 2 B vectors and a
// broadcast of 32 registers. A tail of 16 columns or fewer takes one strip.
constexpr int kRows = 12;

// R rows, S strips of 16 columns (1 or 2), the last strip's lanes masked
// by `mask`; strip t of B starts at b + t * strip_stride.
template <int R, int S>
inline void Tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                 int64_t strip_stride, float* c, int64_t ldc, bool accumulate, __mmask16 mask) {
  __m512 acc[R][S];
  const __mmask16 masks[2] = {S == 1 ? mask : static_cast<__mmask16>(0xffff), mask};
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    _Pragma("GCC unroll 2") for (int t = 0; t < S; ++t) {
      acc[r][t] = accumulate ? _mm512_maskz_loadu_ps(masks[t], c + r * ldc + 16 * t)
                             : _mm512_setzero_ps();
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    __m512 bv[S];
    _Pragma("GCC unroll 2") for (int t = 0; t < S; ++t) {
      bv[t] = _mm512_maskz_loadu_ps(masks[t], b + t * strip_stride + p * ldb);
    }
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * lda + p]);
      _Pragma("GCC unroll 2") for (int t = 0; t < S; ++t) {
        acc[r][t] = _mm512_fmadd_ps(x, bv[t], acc[r][t]);
      }
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    _Pragma("GCC unroll 2") for (int t = 0; t < S; ++t) {
      _mm512_mask_storeu_ps(c + r * ldc + 16 * t, masks[t], acc[r][t]);
    }
  }
}

template <int S>
void Rows(int64_t rows, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          int64_t strip_stride, float* c, int64_t ldc, bool accumulate, __mmask16 mask) {
#define KILN_SMALL_GEMM_ROWS(R) \
  case R:                       \
    return Tile<R, S>(k, a, lda, b, ldb, strip_stride, c, ldc, accumulate, mask)
  switch (rows) {
    KILN_SMALL_GEMM_ROWS(1);
    KILN_SMALL_GEMM_ROWS(2);
    KILN_SMALL_GEMM_ROWS(3);
    KILN_SMALL_GEMM_ROWS(4);
    KILN_SMALL_GEMM_ROWS(5);
    KILN_SMALL_GEMM_ROWS(6);
    KILN_SMALL_GEMM_ROWS(7);
    KILN_SMALL_GEMM_ROWS(8);
    KILN_SMALL_GEMM_ROWS(9);
    KILN_SMALL_GEMM_ROWS(10);
    KILN_SMALL_GEMM_ROWS(11);
    default:
      return Tile<12, S>(k, a, lda, b, ldb, strip_stride, c, ldc, accumulate, mask);
  }
#undef KILN_SMALL_GEMM_ROWS
}

}  // namespace

void SmallGemmAvx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int64_t strip_stride, float* c, int64_t ldc,
                     bool accumulate) {
  for (int64_t j = 0; j < n; j += 32) {
    const int64_t width = n - j < 32 ? n - j : 32;
    const float* bj = b + j / 16 * strip_stride;
    // The last strip's lanes: 16, or what is left of the row.
    const int64_t last = width > 16 ? width - 16 : width;
    const __mmask16 mask = static_cast<__mmask16>((1u << last) - 1);
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t rows = m - i < kRows ? m - i : kRows;
      if (width > 16) {
        Rows<2>(rows, k, a + i * lda, lda, bj, ldb, strip_stride, c + i * ldc + j, ldc,
                accumulate, mask);
      } else {
        Rows<1>(rows, k, a + i * lda, lda, bj, ldb, strip_stride, c + i * ldc + j, ldc,
                accumulate, mask);
      }
    }
  }
}

}  // namespace kiln::runtime::small_gemm_internal
