// Matrix products with few rows and a constant right-hand matrix,
// out[M, N] = A[M, K] @ B[K, N] (+ addend) then activations, for M up to
// kSkinnyMaxRows: classifier heads at small batch, a decode step's
// projections. With so few rows the time is reading B once (its bytes
// dwarf A's and the output's), so the kernel is built around streaming B:
// B is packed at prepare time into 16-column panels, [N/16][K][16] (oneDNN's
// BA16a16b with K rounded up to 16, the padding zero), each a contiguous
// run of memory that one thread reads front to back while the rows of A
// stay in L1. oneDNN's matmul reads such a B at 0.6-0.8 of the rate these
// loops reach (bench/kernels BM_Linear, M 1 and 2, weights of 4 to 400
// MiB). The loops run on AVX-512 where the CPU has it, and then take up to
// 8 rows; with AVX2 only up to 2 (from 4 rows on, its FMAs no longer keep
// up with memory and oneDNN's kernels are faster).
//
// Used by kernels/matmul.cc; the epilogue (addend broadcast to [M, N],
// activations) is applied per panel while the panel's results are in
// cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/onednn_util.h"
#include "runtime/kernels/post_ops.h"

namespace kiln::runtime {

// Rows up to which the skinny kernel computes a product on this CPU (8
// with AVX-512, else 2), and on any.
int64_t SkinnyMaxRows();
inline constexpr int64_t kSkinnyMaxRowsAnyCpu = 8;

namespace skinny_internal {
// The panel loops Run chooses from (tests call each): rows [0, m) of acc
// (m x 16, 64-byte aligned) += a[:, 0:kc] (row stride lda) @ b[0:kc][0:16)
// (b 64-byte aligned, rows of 16 floats). AVX2, and AVX-512
// (skinny_matmul_avx512.cc; only when the CPU has AVX-512F).
void AccumulatePanelAvx2(const float* a, int64_t lda, int64_t m, const float* b, int64_t kc,
                         float* acc);
void AccumulatePanelAvx512(const float* a, int64_t lda, int64_t m, const float* b, int64_t kc,
                           float* acc);
}  // namespace skinny_internal

struct SkinnyMatmul {
  int64_t m = 0, k = 0, n = 0;
  int64_t k_padded = 0;  // rows of each panel
  PackedConstant panels;
  // The addend broadcast to [M, N]: element (i, j) at
  // addend[i * addend_row_stride + j * addend_col_stride].
  bool has_addend = false;
  int64_t addend_row_stride = 0, addend_col_stride = 0;
  std::vector<PostOp> activations;

  // Whether this product (f32, unit scales) runs here: SkinnyMaxRows() rows at most, B a
  // constant of at least a few KiB (below that oneDNN's call costs nothing
  // worth saving), activations the loops implement.
  static bool Applies(int64_t m, int64_t k, int64_t n, const std::vector<PostOp>& activations);

  // Packs the constant `b` (laid out as b_md, [K, N] logically) under
  // sharing key `key` (PackConstant).
  static SkinnyMatmul Make(int64_t m, int64_t k, int64_t n, const dnnl::memory::desc& b_md,
                           const void* b, const std::string& key);

  // out = a @ B (+ addend) then activations; a is [M, K] row-major, out
  // [M, N] row-major; addend as described above (null without one).
  // Splits the panels over the current task arena.
  void Run(const float* a, const float* addend, float* out) const;
};

}  // namespace kiln::runtime
