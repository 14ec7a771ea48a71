#include "runtime/kernels/skinny_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/exec/parallel.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/kernels/post_op_loops.h"

namespace kiln::runtime {
namespace {

using dnnl::memory;

// K is walked in chunks of this many rows (16 KiB of a panel), so that
// when the rows of A take several passes over a chunk it is read from
// memory once and then from L1.
constexpr int64_t kChunk = 64;

// acc[0..64) += sum over k < kc of a[k] * b[k][0..64) (b's rows
// kSkinnyPanel apart): a whole panel row (256 bytes) a step into eight
// accumulators, the eight FMA chains that keep two FMA units of four
// cycles' latency busy. Each step also prefetches `pf_per_step` cache
// lines from `pf` on.
inline void AccumulateRow(const float* a, const float* b, int64_t kc, float* acc,
                          const char* pf, int64_t pf_per_step) {
  constexpr int kVectors = kSkinnyPanel / 8;
  __m256 c[kVectors];
  for (int v = 0; v < kVectors; ++v) c[v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    for (int64_t i = 0; i < pf_per_step; ++i) {
      _mm_prefetch(pf, _MM_HINT_T0);
      pf += 64;
    }
    const __m256 x = _mm256_broadcast_ss(a + k);
    const float* bk = b + k * kSkinnyPanel;
    for (int v = 0; v < kVectors; ++v) c[v] = _mm256_fmadd_ps(x, _mm256_load_ps(bk + 8 * v), c[v]);
  }
  for (int v = 0; v < kVectors; ++v) {
    _mm256_store_ps(acc + 8 * v, _mm256_add_ps(_mm256_load_ps(acc + 8 * v), c[v]));
  }
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

}  // namespace

void skinny_internal::AccumulatePanelAvx2(const float* a, int64_t lda, int64_t m, const float* b,
                                          int64_t /*width*/, int64_t kc, float* acc) {
  // A row of A at a time over whole panel rows (zeros past the width):
  // the first pass streams the chunk from memory at the one-row rate, the
  // others read it from L1. Several rows a pass (4 rows x 16 columns, or
  // 2 x 32, in registers) read each panel row in strided pieces, which
  // kept fewer misses in flight and was slower with the weight in memory
  // (bench/kernels BM_LinearCold).
  // The passes after the first, which only compute, spread prefetches of
  // what the thread reads next (the panel's next chunk, or the next
  // panel) between them, so that memory is busy while they run (compare
  // BM_Linear and BM_LinearCold at 8 rows).
  const char* next = reinterpret_cast<const char*>(b + kc * kSkinnyPanel);
  const int64_t lines = kc * kSkinnyPanel * sizeof(float) / 64;
  const int64_t per_step = m > 1 ? (lines + (m - 1) * kc - 1) / ((m - 1) * kc) : 0;
  for (int64_t r = 0; r < m; ++r) {
    const char* pf = next + (r == 0 ? 0 : (r - 1) * per_step * kc * 64);
    AccumulateRow(a + r * lda, b, kc, acc + r * kSkinnyPanel, pf, r == 0 ? 0 : per_step);
  }
}

bool SkinnyMatmul::Applies(int64_t m, int64_t k, int64_t n,
                           const std::vector<PostOp>& activations) {
  // Many rows on AVX2 pack A (M x K floats) every call where oneDNN
  // repacks B (K x N): with far more rows than outputs (Swin's first stage,
  // 3136 x 384 -> 96) oneDNN's way copies less. Past kPanelMaxRows rows the
  // repacking is spread thin and oneDNN's blocking wins (ViT-B/16 at batch
  // 8, 1576 rows, ran slower as a whole model on these loops).
  const bool rows_fit =
      m <= kSkinnyMaxRows ||
      (!HasAvx512() && m <= kPanelMaxRows && m <= 4 * n && KernelSwitchOn("KILN_PANEL_ROWS"));
  return m >= 1 && rows_fit && k >= 1 && n >= 1 && k * n >= 4096 &&
         LoopsImplement(activations);
}

SkinnyMatmul SkinnyMatmul::Make(int64_t m, int64_t k, int64_t n, const memory::desc& b_md,
                                const void* b, const std::string& key) {
  SkinnyMatmul s;
  s.m = m;
  s.k = k;
  s.n = n;
  // oneDNN's BA16a64b over [K, N]: panels of 64 columns (B), each of K
  // rows rounded up to 16 (A blocks of 16), rows of 64 floats, zeros past
  // N. A panel is contiguous, so each thread streams whole pages.
  // Many rows (AVX2 only) read 16-column strips: BA16a16b, whose four
  // strips of a panel take the same room as a BA16a64b panel.
  const memory::format_tag tag =
      m > kSkinnyMaxRows ? memory::format_tag::BA16a16b : memory::format_tag::BA16a64b;
  const memory::desc packed_md({k, n}, memory::data_type::f32, tag);
  s.panel_stride = (k + 15) / 16 * 16 * kSkinnyPanel;
  s.packed = PackConstant(b_md, b, key, packed_md);
  return s;
}

size_t SkinnyMatmul::ScratchBytes() const {
  if (m <= kSkinnyMaxRows) return 0;
  return static_cast<size_t>((m + kTileRows - 1) / kTileRows * kTileRows * k) * sizeof(float);
}

void SkinnyMatmul::Run(const float* a, const float* addend, float* out, void* scratch) const {
  if (!constant_addend.empty()) addend = constant_addend.data();
  const int64_t count = (n + kSkinnyPanel - 1) / kSkinnyPanel;
  const float* packed_b = static_cast<const float*>(packed.memory.get_data_handle());
  if (m > kSkinnyMaxRows) {
    // A into row tiles once: every panel reads all of it.
    float* tiles = static_cast<float*>(scratch);
    const int64_t tile_count = (m + kTileRows - 1) / kTileRows;
    ParallelFor(tile_count, 8, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kTileRows;
      skinny_internal::PackRowTiles(a + r0 * k, k, std::min(t1 * kTileRows, m) - r0, k,
                                    tiles + r0 * k);
    });
    const int64_t blocks = (m + kPanelBlockRows - 1) / kPanelBlockRows;
    const int64_t block_rows = ((m + blocks - 1) / blocks + kTileRows - 1) / kTileRows * kTileRows;
    // A task: a block of rows and one panel, a block's panels next to each
    // other so that a thread keeps reading one block of A (from L2 and L3)
    // while B streams by: with a panel's blocks next to each other instead,
    // BERT-base at batch 8 (1024 rows) fell behind oneDNN in interleaved
    // whole-model runs, and this way it is ahead. Tasks of several panels,
    // K chunk by chunk over all of them, kept more of the output in L2 too
    // but were slower than one panel a task (bench/kernels BM_Linear at
    // 197 x 768 x 3072).
    const int64_t strip_stride = panel_stride / 4;
    ParallelFor(count * blocks, 1, [&](int64_t t0, int64_t t1) {
      alignas(64) float acc[kPanelBlockRows * kSkinnyPanel];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t p = t % count, r0 = t / count * block_rows;
        if (r0 >= m) continue;
        const int64_t rows = std::min(block_rows, m - r0);
        const int64_t j0 = p * kSkinnyPanel, width = std::min(kSkinnyPanel, n - j0);
        const float* panel = packed_b + p * panel_stride;
        // Whole strips go straight into out; a last panel's partial strip
        // into acc, copied out at the end.
        const bool whole = width % 16 == 0;
        float* c = whole ? out + r0 * n + j0 : acc;
        const int64_t ldc = whole ? n : kSkinnyPanel;
        for (int64_t k0 = 0; k0 < k; k0 += kPanelChunk) {
          const int64_t kc = std::min(kPanelChunk, k - k0);
          // Prefetched during the last strip: the next chunk's first strip.
          const float* next = k0 + kc < k ? panel + (k0 + kc) * 16 : nullptr;
          skinny_internal::MultiplyPanelRowsAvx2(tiles + r0 * k, k, rows, panel, strip_stride,
                                                 width, k0, kc, next, c, ldc);
        }
        if (!whole) {
          for (int64_t r = 0; r < rows; ++r) {
            std::memcpy(out + (r0 + r) * n + j0, acc + r * kSkinnyPanel, width * sizeof(float));
          }
        }
        Epilogue(r0, rows, j0, width, addend, out);
      }
    });
    return;
  }
  const auto accumulate = HasAvx512() ? skinny_internal::AccumulatePanelAvx512
                                      : skinny_internal::AccumulatePanelAvx2;
  // Tasks of at least ~64 KiB of B: smaller ones cost more to hand out
  // than they take to read.
  const int64_t grain = std::max<int64_t>(1, (int64_t{16} << 10) / (k * kSkinnyPanel));
  ParallelFor(count, grain, [&](int64_t p0, int64_t p1) {
    alignas(64) float acc[kSkinnyMaxRows * kSkinnyPanel];
    for (int64_t p = p0; p < p1; ++p) {
      const float* panel = packed_b + p * panel_stride;
      const int64_t j0 = p * kSkinnyPanel;
      const int64_t width = std::min(kSkinnyPanel, n - j0);
      std::fill(acc, acc + m * kSkinnyPanel, 0.0f);
      for (int64_t k0 = 0; k0 < k; k0 += kChunk) {
        accumulate(a + k0, k, m, panel + k0 * kSkinnyPanel, width, std::min(kChunk, k - k0), acc);
      }
      for (int64_t r = 0; r < m; ++r) {
        std::memcpy(out + r * n + j0, acc + r * kSkinnyPanel, width * sizeof(float));
      }
      Epilogue(0, m, j0, width, addend, out);
    }
  });
}

void SkinnyMatmul::Epilogue(int64_t r0, int64_t rows, int64_t j0, int64_t width,
                            const float* addend, float* out) const {
  if (!has_addend && activations.empty()) return;
  for (int64_t r = r0; r < r0 + rows; ++r) {
    float* row = out + r * n + j0;
    if (has_addend) {
      const float* add = addend + r * addend_row_stride + j0 * addend_col_stride;
      if (addend_col_stride == 1) {
        for (int64_t j = 0; j < width; ++j) row[j] += add[j];
      } else {
        for (int64_t j = 0; j < width; ++j) row[j] += add[0];
      }
    }
    if (!activations.empty()) ApplyPostOps(activations, row, width);
  }
}

}  // namespace kiln::runtime
