// SkinnyMatmul's panel loops, AVX2 and (where the CPU has it) AVX-512,
// against a double-precision product, for every row count the kernel
// takes and panels of every width, B a BA16a64b panel (rows of 64 floats,
// zeros past the width) whose last row is followed by an unreadable page.
// The many-row loops likewise, from A packed in row tiles into a panel of
// 16-column strips. Whole products (packing, blocks, epilogue) are tested
// through kiln.addmm in matmul_test.cc.
#include "runtime/microkernels/skinny_panel.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <vector>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

using PanelFn =
    std::function<void(const float*, int64_t, int64_t, const float*, int64_t, int64_t, float*)>;

// `floats` floats ending right before a PROT_NONE page: a read past the
// end faults.
class GuardedFloats {
 public:
  explicit GuardedFloats(size_t floats) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = (floats * sizeof(float) + page - 1) / page * page;
    size_ = bytes + page;
    base_ = static_cast<char*>(
        mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base_ + bytes, page, PROT_NONE);
    data_ = reinterpret_cast<float*>(base_ + bytes) - floats;
  }
  ~GuardedFloats() { munmap(base_, size_); }
  float* data() { return data_; }

 private:
  char* base_;
  size_t size_;
  float* data_;
};

// (rows, width)
class SkinnyPanelTest : public ::testing::TestWithParam<std::tuple<int64_t, int64_t>> {
 protected:
  void Check(const PanelFn& fn) {
    const auto [m, width] = GetParam();
    const int64_t kc = 37, lda = 50;  // an odd chunk inside wider rows of A
    const int64_t ldb = kSkinnyPanel;
    const auto a = RandomFloats(m * lda, 1);
    const auto values = RandomFloats(kc * width, 2);
    GuardedFloats b(kc * ldb);
    std::memset(b.data(), 0, kc * ldb * sizeof(float));
    for (int64_t k = 0; k < kc; ++k) {
      std::memcpy(b.data() + k * ldb, values.data() + k * width, width * sizeof(float));
    }
    const auto start = RandomFloats(m * kSkinnyPanel, 3);
    float* acc = static_cast<float*>(std::aligned_alloc(64, m * kSkinnyPanel * sizeof(float)));
    std::memcpy(acc, start.data(), m * kSkinnyPanel * sizeof(float));
    fn(a.data(), lda, m, b.data(), width, kc, acc);
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < width; ++j) {
        double want = start[r * kSkinnyPanel + j];
        for (int64_t k = 0; k < kc; ++k) {
          want += static_cast<double>(a[r * lda + k]) * values[k * width + j];
        }
        EXPECT_NEAR(acc[r * kSkinnyPanel + j], want, 1e-4) << "row " << r << " column " << j;
      }
    }
    std::free(acc);
  }
};

TEST_P(SkinnyPanelTest, Avx2AccumulatesTheProduct) {
  Check(skinny_internal::AccumulatePanelAvx2);
}

TEST_P(SkinnyPanelTest, Avx512AccumulatesTheProduct) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512F on this CPU";
  Check(skinny_internal::AccumulatePanelAvx512);
}

INSTANTIATE_TEST_SUITE_P(Panels, SkinnyPanelTest,
                         ::testing::Combine(::testing::Range<int64_t>(1, 9),
                                            ::testing::Values<int64_t>(64, 40, 16, 7)));

// The many-row loops: (rows, width, k). A in row tiles (PackRowTiles), B a
// panel of 16-column strips (BA16a16b) whose last strip is followed by an
// unreadable page; acc starts as garbage, which must be overwritten.
class PanelRowsTest
    : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, int64_t>> {};

TEST_P(PanelRowsTest, Avx2ComputesTheProduct) {
  const auto [m, width, k] = GetParam();
  const int64_t lda = k + 3;
  const int64_t strips = (width + 15) / 16, strip_stride = (k + 15) / 16 * 16 * 16;
  const auto a = RandomFloats(m * lda, 1);
  const auto values = RandomFloats(k * width, 2);
  GuardedFloats b((strips - 1) * strip_stride + k * 16);
  std::memset(b.data(), 0, ((strips - 1) * strip_stride + k * 16) * sizeof(float));
  for (int64_t kk = 0; kk < k; ++kk) {
    for (int64_t j = 0; j < width; ++j) {
      b.data()[j / 16 * strip_stride + kk * 16 + j % 16] = values[kk * width + j];
    }
  }
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  std::vector<float> packed(tiles * kTileRows * k, 123.0f);
  skinny_internal::PackRowTiles(a.data(), lda, m, k, packed.data());
  float* acc = static_cast<float*>(std::aligned_alloc(64, m * kSkinnyPanel * sizeof(float)));
  for (int64_t i = 0; i < m * kSkinnyPanel; ++i) acc[i] = 1e30f;
  for (int64_t k0 = 0; k0 < k; k0 += kPanelChunk) {
    const int64_t kc = std::min(kPanelChunk, k - k0);
    // The next chunk's first strip as the prefetch target, or none.
    const float* next = k0 + kc < k ? b.data() + (k0 + kc) * 16 : nullptr;
    skinny_internal::MultiplyPanelRowsAvx2(packed.data(), k, m, b.data(), strip_stride, width, k0,
                                           kc, next, acc, kSkinnyPanel);
  }
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < width; ++j) {
      double want = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        want += static_cast<double>(a[r * lda + kk]) * values[kk * width + j];
      }
      ASSERT_NEAR(acc[r * kSkinnyPanel + j], want, 1e-4 * std::sqrt(k))
          << "row " << r << " column " << j;
    }
  }
  std::free(acc);
}

INSTANTIATE_TEST_SUITE_P(Panels, PanelRowsTest,
                         ::testing::Combine(::testing::Values<int64_t>(1, 5, 6, 13, 240),
                                            ::testing::Values<int64_t>(64, 40, 7),
                                            ::testing::Values<int64_t>(3, 37, 256, 300)));

}  // namespace
}  // namespace kiln::runtime::testing
