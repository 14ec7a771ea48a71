// The AVX-512 tiles of SmallGemm (small_gemm.h). This file alone is
// compiled with AVX-512 enabled (runtime/CMakeLists.txt) and is reached
// only through SmallGemm's check of the CPU; it includes nothing that
// other files compile for AVX2 only (their inline functions would get an
// AVX-512 copy here that the linker could pick for everyone).
#include <immintrin.h>

#include "runtime/microkernels/small_gemm.h"

namespace kiln::runtime::small_gemm_internal {
namespace {

constexpr int kRows = 12;  // 12 x 16 tile: 12 accumulators, 1 B vector, 1 broadcast

template <int R>
inline void Tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                 int64_t ldc, bool accumulate, __mmask16 mask) {
  __m512 acc[R];
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    acc[r] = accumulate ? _mm512_maskz_loadu_ps(mask, c + r * ldc) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m512 bv = _mm512_maskz_loadu_ps(mask, b + p * ldb);
    _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), bv, acc[r]);
    }
  }
  _Pragma("GCC unroll 16") for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, mask, acc[r]);
  }
}

void Rows(int64_t rows, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          float* c, int64_t ldc, bool accumulate, __mmask16 mask) {
  switch (rows) {
    case 1: return Tile<1>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 2: return Tile<2>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 3: return Tile<3>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 4: return Tile<4>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 5: return Tile<5>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 6: return Tile<6>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 7: return Tile<7>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 8: return Tile<8>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 9: return Tile<9>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 10: return Tile<10>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    case 11: return Tile<11>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
    default: return Tile<12>(k, a, lda, b, ldb, c, ldc, accumulate, mask);
  }
}

}  // namespace

void SmallGemmAvx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t width = n - j < 16 ? n - j : 16;
    const __mmask16 mask = static_cast<__mmask16>((1u << width) - 1);
    for (int64_t i = 0; i < m; i += kRows) {
      const int64_t rows = m - i < kRows ? m - i : kRows;
      Rows(rows, k, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, accumulate, mask);
    }
  }
}

}  // namespace kiln::runtime::small_gemm_internal
