// The panel loops of SkinnyMatmul (skinny_matmul.h), one per instruction
// set. This header includes nothing but <cstdint>: the AVX-512 loops'
// file, built with AVX-512 enabled, may include no header with inline code
// (the linker could pick its AVX-512 copy of such a function for every
// caller, including on CPUs without AVX-512).
#pragma once

#include <cstdint>

namespace kiln::runtime {

// Columns per panel: the unit of work of a thread.
inline constexpr int64_t kSkinnyPanel = 64;

// Rows of A a task of the many-row loop takes at most, and the chunk of
// K it walks them in: a chunk of a block's rows (240 KiB) stays in L2
// while it meets the chunk of each strip of B (16 KiB, L1) in turn.
inline constexpr int64_t kPanelBlockRows = 240;
inline constexpr int64_t kPanelChunk = 256;
// Rows up to which products on AVX2 take the many-row loops.
inline constexpr int64_t kPanelMaxRows = 1024;
// Rows of the many-row loop's register tile, the unit A is packed in.
inline constexpr int64_t kTileRows = 6;

namespace skinny_internal {
// Rows [0, m) of acc (m x kSkinnyPanel, 64-byte aligned) += a[:, 0:kc]
// (row stride lda) @ columns [0, width) of b's rows 0..kc, which are
// kSkinnyPanel floats apart, 32-byte aligned and zero past `width` (a
// BA16a64b panel); columns of acc past `width` may change. AVX2, and
// AVX-512 (skinny_matmul_avx512.cc; only when the CPU has AVX-512F).
// Tests call each.
void AccumulatePanelAvx2(const float* a, int64_t lda, int64_t m, const float* b, int64_t width,
                         int64_t kc, float* acc);
void AccumulatePanelAvx512(const float* a, int64_t lda, int64_t m, const float* b, int64_t width,
                           int64_t kc, float* acc);

// tiles = a[0:m, 0:k] (row stride lda) as tiles of kTileRows rows: tile
// t holds k steps of kTileRows floats (rows past m zero) from
// tiles + t * kTileRows * k.
void PackRowTiles(const float* a, int64_t lda, int64_t m, int64_t k, float* tiles);

// Rows [0, m) of c (m <= kPanelBlockRows rows, ldc floats apart) =
// (k0 == 0) or += (k0 > 0) the rows packed in `tiles` (PackRowTiles, K =
// k), columns [k0, k0 + kc), @ rows [k0, k0 + kc) and columns [0, width)
// of a 64-column panel packed as strips of 16 columns (BA16a16b: K rows
// of 16 floats, 32-byte aligned, zeros past `width`), strip_stride floats
// apart. Writes c's columns up to `width` rounded up to 16. `next`, if
// not null, is the kc rows of a strip the caller reads next: prefetched.
// AVX2, for CPUs without AVX-512, where oneDNN's matmul repacks its
// weight on every call (panel_rows_avx2.cc). Tests call it.
void MultiplyPanelRowsAvx2(const float* tiles, int64_t k, int64_t m, const float* b,
                           int64_t strip_stride, int64_t width, int64_t k0, int64_t kc,
                           const float* next, float* c, int64_t ldc);
}  // namespace skinny_internal

}  // namespace kiln::runtime
