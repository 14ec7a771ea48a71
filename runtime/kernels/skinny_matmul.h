// Matrix products with few rows and a constant right-hand matrix,
// out[M, N] = A[M, K] @ B[K, N] (+ addend) then activations, for M up to
// SkinnyMaxRows(): classifier heads at small batch, a decode step's
// projections. With so few rows the time is reading B once (its bytes
// dwarf A's and the output's), so the loops are built around streaming B
// panel by panel (64 columns, split between threads) while the rows of A
// stay in L1. oneDNN's matmul reads such a B at 0.6-0.8 of the rate these
// loops reach (bench/kernels BM_Linear, M 1 to 8, weights of 4 to 400 MiB).
//
// B is read in the layout oneDNN's matmul packs a constant weight into on
// this CPU, so that a graph's shape variants with few and with many rows
// (a decode step and a prefill) share one packed copy (PackConstant):
//   AVX-512: BA16a64b, panels of 64 columns, K rounded up to 16, padding 0;
//   AVX2 (oneDNN's jit gemm): plain row-major [K, N].
// The loops run on AVX-512 where the CPU has it, and then take up to 8
// rows; with AVX2 only up to 2 (from 4 rows on, its FMAs no longer keep up
// with memory and oneDNN's kernels are faster).
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

// Rows up to which the skinny kernel computes a product on this CPU (8
// with AVX-512, else 2), and on any.
int64_t SkinnyMaxRows();
inline constexpr int64_t kSkinnyMaxRowsAnyCpu = 8;

// Where B's panels lie: panel p's row k starts at
// b + p * panel_stride + k * row_stride.
struct SkinnyLayout {
  int64_t row_stride = 0, panel_stride = 0;
  bool padded = false;  // columns up to the panel's width are readable (zeros)
};

struct SkinnyMatmul {
  int64_t m = 0, k = 0, n = 0;
  SkinnyLayout layout;
  PackedConstant packed;
  // The addend broadcast to [M, N]: element (i, j) at
  // addend[i * addend_row_stride + j * addend_col_stride].
  bool has_addend = false;
  int64_t addend_row_stride = 0, addend_col_stride = 0;
  // A constant addend (linear's bias), copied at prepare time so the
  // compiled graph need not keep the constant; Run's addend is then unused.
  std::vector<float> constant_addend;
  std::vector<PostOp> activations;

  // Whether this product (f32, unit scales) runs here: SkinnyMaxRows() rows
  // at most, B a constant of at least a few KiB (below that oneDNN's call
  // costs nothing worth saving), activations the loops implement.
  static bool Applies(int64_t m, int64_t k, int64_t n, const std::vector<PostOp>& activations);

  // Packs the constant `b` (laid out as b_md, [K, N] logically) under
  // sharing key `key` (PackConstant) into the layout above.
  static SkinnyMatmul Make(int64_t m, int64_t k, int64_t n, const dnnl::memory::desc& b_md,
                           const void* b, const std::string& key);

  // out = a @ B (+ addend) then activations; a is [M, K] row-major, out
  // [M, N] row-major; addend as described above (null without one).
  // Splits the panels over the current task arena.
  void Run(const float* a, const float* addend, float* out) const;
};

}  // namespace kiln::runtime
