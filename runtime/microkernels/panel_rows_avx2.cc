// The many-row loops of SkinnyMatmul (skinny_panel.h): products with
// more rows than kSkinnyMaxRows on CPUs without AVX-512.
//
// oneDNN's AVX2 matmul is a gemm that repacks B on every call. A model's
// layers each read their weight once a call, from memory, and that
// repacking then costs a large share of the product (compare bench/kernels
// BM_LinearCold, the weight evicted, with BM_Linear, the weight hot, at
// ViT-B/16's 197x768x3072). These loops read B as packed at
// compile time, in strips of 16 columns (BA16a16b: K rows of 16 floats,
// contiguous; the few-row loops read BA16a64b, so a weight that both
// kinds of product use is packed twice).
//
// Blocking, for a block of up to kPanelBlockRows rows and the four strips
// of one 64-column panel: K in chunks of kPanelChunk; within a chunk each
// strip's rows (16 KiB, L1) serve every 6-row tile of the block in turn,
// whose part of A (up to 240 KiB) stays in L2. A tile keeps its 6 x 16
// sums in 12 registers over the chunk: two loads of B and six broadcasts
// of A for 12 multiply-adds. A is first copied into tiles of 6 rows
// (PackRowTiles), so that a tile reads one stream of 24 bytes a step
// rather than six rows 4 bytes at a time. (Slices of BA16a64b's 64-column
// rows would be 256 bytes a row apart, on a quarter of L1's sets, where
// 256 rows do not fit: 1024 rows ran at 46% of the peak that way.)
#include <immintrin.h>

#include <algorithm>

#include "runtime/microkernels/skinny_panel.h"

namespace kiln::runtime {
namespace {

constexpr int64_t kSlice = 16;  // columns of a register tile

static_assert(kPanelBlockRows % kTileRows == 0, "blocks hold whole tiles");

// c (rows <= 6 rows, ldc floats apart) = or += the tile a (kc
// steps of 6 floats, one per row) @ b (kc rows of 16 floats). The sums are
// named variables: in an array GCC 12 stores each to the stack every step
// and the loop runs at a third of the multiply-add rate.
template <bool kAccumulate>
void Tile(const float* a, const float* b, int64_t kc, float* c, int64_t ldc, int rows) {
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z;
  __m256 c30 = z, c31 = z, c40 = z, c41 = z, c50 = z, c51 = z;
  // Unrolled: one step a trip left the multiply-adds at about four fifths
  // of their rate, the loop's own adds and branch in their way.
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k, a += kTileRows, b += kSlice) {
    const __m256 b0 = _mm256_load_ps(b);
    const __m256 b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  const __m256 sums[kTileRows][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                     {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < rows; ++i) {
    float* ci = c + i * ldc;
    if constexpr (kAccumulate) {
      _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), sums[i][0]));
      _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), sums[i][1]));
    } else {
      _mm256_storeu_ps(ci, sums[i][0]);
      _mm256_storeu_ps(ci + 8, sums[i][1]);
    }
  }
}

}  // namespace

void skinny_internal::PackRowTiles(const float* a, int64_t lda, int64_t m, int64_t k,
                                   float* tiles) {
  for (int64_t r = 0; r < m; r += kTileRows) {
    const int64_t rows = std::min<int64_t>(kTileRows, m - r);
    float* t = tiles + r * k;
    for (int64_t i = 0; i < rows; ++i) {
      const float* src = a + (r + i) * lda;
      for (int64_t j = 0; j < k; ++j) t[j * kTileRows + i] = src[j];
    }
    for (int64_t i = rows; i < kTileRows; ++i) {
      for (int64_t j = 0; j < k; ++j) t[j * kTileRows + i] = 0.0f;
    }
  }
}

void skinny_internal::MultiplyPanelRowsAvx2(const float* tiles, int64_t k, int64_t m,
                                            const float* b, int64_t strip_stride, int64_t width,
                                            int64_t k0, int64_t kc, const float* next, float* c,
                                            int64_t ldc) {
  const int64_t slices = (width + kSlice - 1) / kSlice;
  const int64_t tile_count = (m + kTileRows - 1) / kTileRows;
  const auto tile = k0 == 0 ? Tile<false> : Tile<true>;
  // A chunk of a strip is kc / 4 cache lines.
  const int64_t lines = kc * kSlice * sizeof(float) / 64;
  const int64_t per_tile = (lines + tile_count - 1) / tile_count;
  for (int64_t s = 0; s < slices; ++s) {
    const float* bs = b + s * strip_stride + k0 * kSlice;
    // What is read after this strip (the next strip's chunk, or the
    // caller's next) into L2 while this one computes, a few lines before
    // each tile, so that a weight read from memory arrives ahead of its
    // use.
    const float* ahead = s + 1 < slices ? bs + strip_stride : next;
    int64_t line = ahead != nullptr ? 0 : lines;
    for (int64_t t = 0; t < tile_count; ++t) {
      for (int64_t i = 0; i < per_tile && line < lines; ++i, ++line) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead) + line * 64, _MM_HINT_T1);
      }
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, m - t * kTileRows));
      tile(tiles + t * kTileRows * k + k0 * kTileRows, bs, kc,
           c + t * kTileRows * ldc + s * kSlice, ldc, rows);
    }
  }
}

}  // namespace kiln::runtime
