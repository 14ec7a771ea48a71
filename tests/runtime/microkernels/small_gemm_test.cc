// SmallGemm's two implementations (AVX2 everywhere, AVX-512 where the CPU
// has it) against a double-precision product: tile heights and widths
// with remainders, row strides wider than the blocks, accumulation.
#include "runtime/microkernels/small_gemm.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random_floats.h"

namespace kiln::runtime::testing {
namespace {

using Impl = std::function<void(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                                int64_t, int64_t, float*, int64_t, bool)>;

struct GemmCase {
  int64_t m, n, k;
  bool accumulate;
};

// B row-major (strips 16 floats apart), or in strips of 16 columns, each
// a contiguous [k, 16] block with room to spare between strips.
enum class BLayout { kRowMajor, kStrips };

void CheckImpl(const Impl& impl, const GemmCase& c, BLayout layout) {
  // Blocks inside wider matrices: every leading dimension exceeds its width.
  const int64_t lda = c.k + 3, ldc = c.n + 7;
  const int64_t k1 = std::max<int64_t>(c.k, 1), strips = (c.n + 15) / 16;
  const bool in_strips = layout == BLayout::kStrips;
  const int64_t ldb = in_strips ? kSmallGemmStrip : c.n + 5;
  const int64_t strip_stride = in_strips ? k1 * kSmallGemmStrip + 8 : kSmallGemmStrip;
  const auto a = RandomFloats(c.m * lda, 1);
  const auto b = RandomFloats(in_strips ? strips * strip_stride : k1 * ldb, 2);
  auto b_at = [&](int64_t p, int64_t j) { return b[j / 16 * strip_stride + p * ldb + j % 16]; };
  std::vector<float> out = RandomFloats(c.m * ldc, 3);
  const std::vector<float> before = out;
  impl(c.m, c.n, c.k, a.data(), lda, b.data(), ldb, strip_stride, out.data(), ldc, c.accumulate);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= c.n) {  // outside the block: untouched
        EXPECT_EQ(out[i * ldc + j], before[i * ldc + j]) << i << "," << j;
        continue;
      }
      double want = c.accumulate ? before[i * ldc + j] : 0.0;
      for (int64_t p = 0; p < c.k; ++p) {
        want += static_cast<double>(a[i * lda + p]) * b_at(p, j);
      }
      EXPECT_NEAR(out[i * ldc + j], want, 1e-5 * (1 + c.k)) << i << "," << j;
    }
  }
}

class SmallGemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(SmallGemmTest, Avx2MatchesReference) {
  for (BLayout l : {BLayout::kRowMajor, BLayout::kStrips}) {
    CheckImpl(small_gemm_internal::SmallGemmAvx2, GetParam(), l);
  }
}

TEST_P(SmallGemmTest, Avx512MatchesReference) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this CPU";
  for (BLayout l : {BLayout::kRowMajor, BLayout::kStrips}) {
    CheckImpl(small_gemm_internal::SmallGemmAvx512, GetParam(), l);
  }
}

TEST_P(SmallGemmTest, DispatchMatchesReference) {
  CheckImpl(SmallGemmStrips, GetParam(), BLayout::kStrips);
  CheckImpl(
      [](int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
         int64_t, float* c, int64_t ldc, bool acc) { SmallGemm(m, n, k, a, lda, b, ldb, c, ldc, acc); },
      GetParam(), BLayout::kRowMajor);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SmallGemmTest,
    ::testing::Values(GemmCase{1, 1, 1, false}, GemmCase{6, 16, 16, false},
                      GemmCase{12, 32, 64, true}, GemmCase{13, 17, 5, false},
                      GemmCase{7, 45, 33, true}, GemmCase{25, 8, 100, false},
                      GemmCase{24, 64, 64, false},  // whole 12 x 32 tiles
                      GemmCase{13, 48, 9, true},   // a 32-wide tile, then one strip
                      GemmCase{5, 31, 7, false},   // one 32-wide tile, its second strip partial
                      GemmCase{3, 70, 0, false},  // k = 0: zeros
                      GemmCase{2, 5, 0, true}));  // k = 0, accumulate: unchanged

}  // namespace
}  // namespace kiln::runtime::testing
