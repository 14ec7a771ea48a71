// Matrix products with few rows and a constant right-hand matrix,
// out[M, N] = A[M, K] @ B[K, N] (+ addend) then activations, for M up to
// kSkinnyMaxRows: classifier heads at small batch, a decode step's
// projections. With so few rows the time is reading B once (its bytes
// dwarf A's and the output's), so the loops are built around streaming B
// panel by panel (64 columns, split between threads) while the rows of A
// stay in L1. oneDNN's matmul reads such a B at 0.6-0.8 of the rate these
// loops reach (bench/kernels BM_Linear, M 1 to 8, weights of 4 to 400 MiB).
//
// B is packed once into oneDNN's BA16a64b (panels of 64 columns, each
// contiguous: a thread streams whole pages; plain [K, N] rows 16 KiB
// apart read at half the rate on AVX2, bench/kernels BM_LinearCold). On
// AVX-512 that is the layout oneDNN's own matmul packs a constant weight
// into, so a graph's shape variants with few and with many rows (a decode
// step and a prefill) share one packed copy (PackConstant); oneDNN's AVX2
// gemm reads plain rows, so there such a weight is packed twice. The loops
// run on AVX-512 where the CPU has it, else on AVX2.
//
// On CPUs without AVX-512 the same struct also takes products with more
// rows (up to kPanelMaxRows, skinny_panel.h): oneDNN's AVX2 matmul repacks
// a constant weight on every call, which in a model, where each weight
// comes from memory once a call, cost up to a third of the product. There
// B is packed once into 16-column strips (BA16a16b, the same room as
// BA16a64b's panels) and A into 6-row tiles each call
// (panel_rows_avx2.cc). KILN_PANEL_ROWS=0 leaves those products to oneDNN.
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
#include "runtime/kernels/skinny_panel.h"

namespace kiln::runtime {

// Rows up to which the skinny kernel computes a product: with 8 rows it
// still reads a streamed weight faster than oneDNN's AVX2 gemm (bench/
// kernels BM_Linear and BM_LinearCold, M 8).
inline constexpr int64_t kSkinnyMaxRows = 8;

struct SkinnyMatmul {
  int64_t m = 0, k = 0, n = 0;
  // Panel p's row k starts at packed + p * panel_stride + k * kSkinnyPanel.
  PackedConstant packed;
  int64_t panel_stride = 0;
  // The addend broadcast to [M, N]: element (i, j) at
  // addend[i * addend_row_stride + j * addend_col_stride].
  bool has_addend = false;
  int64_t addend_row_stride = 0, addend_col_stride = 0;
  // A constant addend (linear's bias), copied at prepare time so the
  // compiled graph need not keep the constant; Run's addend is then unused.
  std::vector<float> constant_addend;
  std::vector<PostOp> activations;

  // Whether this product (f32, unit scales) runs here: kSkinnyMaxRows rows
  // at most (more on AVX2, see above), B a constant of at least a few KiB
  // (below that oneDNN's call costs nothing worth saving), activations the
  // loops implement.
  static bool Applies(int64_t m, int64_t k, int64_t n, const std::vector<PostOp>& activations);

  // Packs the constant `b` (laid out as b_md, [K, N] logically) under
  // sharing key `key` (PackConstant) into BA16a64b.
  static SkinnyMatmul Make(int64_t m, int64_t k, int64_t n, const dnnl::memory::desc& b_md,
                           const void* b, const std::string& key);

  // Bytes of scratch Run needs (A packed into row tiles, for many rows).
  size_t ScratchBytes() const;

  // out = a @ B (+ addend) then activations; a is [M, K] row-major, out
  // [M, N] row-major; addend as described above (null without one);
  // scratch of ScratchBytes(), 32-byte aligned. Splits the panels over the
  // current task arena.
  void Run(const float* a, const float* addend, float* out, void* scratch) const;

 private:
  // Rows [r0, r0 + rows) of out, columns [j0, j0 + width), in place: the
  // addend, then the activations, while they are in cache.
  void Epilogue(int64_t r0, int64_t rows, int64_t j0, int64_t width, const float* addend,
                float* out) const;
};

}  // namespace kiln::runtime
