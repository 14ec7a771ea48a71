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
}  // namespace skinny_internal

}  // namespace kiln::runtime
