// SkinnyMatmul's panel loops, AVX2 and (where the CPU has it) AVX-512,
// against a double-precision product, for every row count the kernel
// takes; whole products (packing, epilogue) are tested through kiln.addmm
// in matmul_test.cc.
#include "runtime/kernels/skinny_matmul.h"

#include <cstdlib>
#include <functional>
#include <memory>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

using PanelFn = std::function<void(const float*, int64_t, int64_t, const float*, int64_t, float*)>;

struct Aligned {
  explicit Aligned(size_t n)
      : p(static_cast<float*>(std::aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64))) {}
  ~Aligned() { std::free(p); }
  float* p;
};

void CheckPanel(const PanelFn& fn, int64_t m) {
  const int64_t kc = 37, lda = 50;  // an odd chunk inside wider rows
  const auto a = RandomFloats(m * lda, 1);
  const auto b_values = RandomFloats(kc * 16, 2);
  const auto start = RandomFloats(m * 16, 3);
  Aligned b(kc * 16), acc(m * 16);
  std::copy(b_values.begin(), b_values.end(), b.p);
  std::copy(start.begin(), start.end(), acc.p);
  fn(a.data(), lda, m, b.p, kc, acc.p);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < 16; ++j) {
      double want = start[r * 16 + j];
      for (int64_t k = 0; k < kc; ++k) want += static_cast<double>(a[r * lda + k]) * b.p[k * 16 + j];
      EXPECT_NEAR(acc.p[r * 16 + j], want, 1e-4) << "row " << r << " column " << j;
    }
}

class SkinnyPanelTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SkinnyPanelTest, Avx2AccumulatesTheProduct) {
  CheckPanel(skinny_internal::AccumulatePanelAvx2, GetParam());
}

TEST_P(SkinnyPanelTest, Avx512AccumulatesTheProduct) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this CPU";
  CheckPanel(skinny_internal::AccumulatePanelAvx512, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Rows, SkinnyPanelTest, ::testing::Range<int64_t>(1, 9));

}  // namespace
}  // namespace kiln::runtime::testing
