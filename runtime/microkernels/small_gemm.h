// Products of small row-major f32 blocks that a kernel already holds,
// computed on the calling thread: C[m, n] (+)= A[m, k] @ B[k, n]. For
// kernels that work block by block inside their own parallel loop
// (attention: a block of queries against all keys, then against the
// values), where a oneDNN primitive per block would cost more to call than
// the block takes.
//
// Register-tiled (6 rows x 16 columns per tile on AVX2; 12 x 32 on
// AVX-512, small_gemm_avx512.cc, when the CPU has it: two B vectors and a
// broadcast feed 24 FMAs, where a 12 x 16 tile's 12 FMAs took 13 loads). B's rows are read 16
// floats at a time: the last tile of a row reads only the n % 16 floats
// that belong to it.
#pragma once

#include <cstdint>

namespace kiln::runtime {

// c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0)
//                  + sum over p < k of a[i * lda + p] * b[p * ldb + j]
// for i < m, j < n. No aliasing between c and a or b.
void SmallGemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate);

// The same product with B stored in strips of kSmallGemmStrip columns:
// B's element (p, j) at b[(j / 16) * strip_stride + p * ldb + j % 16]
// (ldb is then usually 16, each strip a contiguous [k, 16] block, as
// attention lays out K^T and V). SmallGemm is this with strip_stride 16.
inline constexpr int64_t kSmallGemmStrip = 16;
void SmallGemmStrips(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int64_t strip_stride, float* c, int64_t ldc,
                     bool accumulate);

namespace small_gemm_internal {
// The two implementations SmallGemmStrips chooses from (tests call each):
// AVX2, and AVX-512 (small_gemm_avx512.cc; only when the CPU has
// AVX-512F).
void SmallGemmAvx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, int64_t strip_stride, float* c, int64_t ldc, bool accumulate);
void SmallGemmAvx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int64_t strip_stride, float* c, int64_t ldc,
                     bool accumulate);
}  // namespace small_gemm_internal

}  // namespace kiln::runtime
