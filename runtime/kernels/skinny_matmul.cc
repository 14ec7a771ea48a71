#include "runtime/kernels/skinny_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/exec/parallel.h"
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
  // kept fewer misses in flight: 8 rows of 9216 x 4096 took 14 to 18 ms
  // that way, 12 to 14 ms this way (bench/kernels BM_LinearCold).
  // The passes after the first, which only compute, spread prefetches of
  // what the thread reads next (the panel's next chunk, or the next
  // panel) between them, so that memory is busy while they run: 8 rows
  // 1.15x to 1.45x faster (BM_Linear and BM_LinearCold at 8 rows).
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
  return m >= 1 && m <= kSkinnyMaxRows && k >= 1 && n >= 1 && k * n >= 4096 &&
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
  const memory::desc packed_md({k, n}, memory::data_type::f32, memory::format_tag::BA16a64b);
  s.panel_stride = (k + 15) / 16 * 16 * kSkinnyPanel;
  s.packed = PackConstant(b_md, b, key, packed_md);
  return s;
}

void SkinnyMatmul::Run(const float* a, const float* addend, float* out) const {
  if (!constant_addend.empty()) addend = constant_addend.data();
  const int64_t count = (n + kSkinnyPanel - 1) / kSkinnyPanel;
  const float* packed_b = static_cast<const float*>(packed.memory.get_data_handle());
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
        float* row = acc + r * kSkinnyPanel;
        if (has_addend) {
          const float* add = addend + r * addend_row_stride + j0 * addend_col_stride;
          for (int64_t j = 0; j < width; ++j) row[j] += add[j * addend_col_stride];
        }
        if (!activations.empty()) ApplyPostOps(activations, row, width);
        std::memcpy(out + r * n + j0, row, width * sizeof(float));
      }
    }
  });
}

}  // namespace kiln::runtime
