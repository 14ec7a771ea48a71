// Tests FftPlan (fft_plan.cc) against the DFT's definition summed in double
// precision: lengths of every radix path (4, 2, 3, the direct radices up to
// 61) and of Bluestein's (a prime factor above 61), both signs.
#include "runtime/kernels/fft_plan.h"

#include <cmath>
#include <complex>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random_floats.h"

namespace kiln::runtime::testing {
namespace {

using CD = std::complex<double>;

std::vector<CD> Dft(const std::vector<Complex>& x, int sign) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<CD> out(n);
  for (int64_t k = 0; k < n; ++k) {
    CD sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double angle = sign * 2.0 * M_PI * static_cast<double>((j * k) % n) / n;
      sum += CD(x[j].real(), x[j].imag()) * CD(std::cos(angle), std::sin(angle));
    }
    out[k] = sum;
  }
  return out;
}

// max |got - want| over max |want|.
double RelError(int64_t n, int sign, uint32_t seed) {
  const std::vector<float> r = RandomFloats(2 * n, seed);
  std::vector<Complex> x(n);
  for (int64_t j = 0; j < n; ++j) x[j] = Complex(r[2 * j], r[2 * j + 1]);
  const std::vector<CD> want = Dft(x, sign);
  FftPlan plan(n, sign);
  EXPECT_EQ(plan.size(), n);
  std::vector<Complex> data = x, work(plan.WorkSize());
  plan.Run(data.data(), work.data());
  double err = 0, scale = 0;
  for (int64_t k = 0; k < n; ++k) {
    err = std::max(err, std::abs(CD(data[k].real(), data[k].imag()) - want[k]));
    scale = std::max(scale, std::abs(want[k]));
  }
  return err / scale;
}

TEST(FftPlanTest, EveryLengthUpTo128BothSigns) {
  for (int64_t n = 1; n <= 128; ++n) {
    for (int sign : {-1, 1}) {
      EXPECT_LT(RelError(n, sign, static_cast<uint32_t>(n)), 2e-6) << "n=" << n << " sign=" << sign;
    }
  }
}

TEST(FftPlanTest, ModelSizesAndLargePrimeFactors) {
  // 512 and 768: FNet's sequence and hidden sizes; 1009 and 2 * 67 * 5 have
  // prime factors past the direct radices (Bluestein); 59 * 61 two large
  // direct radices; 4096 many radix-4 stages.
  for (int64_t n : {243, 500, 512, 768, 1000, 1009, 670, 3599, 4096}) {
    for (int sign : {-1, 1}) {
      EXPECT_LT(RelError(n, sign, 7), 4e-6) << "n=" << n << " sign=" << sign;
    }
  }
}

TEST(FftPlanTest, ForwardThenBackwardGivesNTimesTheInput) {
  const int64_t n = 360;
  const std::vector<float> r = RandomFloats(2 * n, 3);
  std::vector<Complex> x(n);
  for (int64_t j = 0; j < n; ++j) x[j] = Complex(r[2 * j], r[2 * j + 1]);
  FftPlan fwd(n, -1), bwd(n, 1);
  std::vector<Complex> data = x, work(std::max(fwd.WorkSize(), bwd.WorkSize()));
  fwd.Run(data.data(), work.data());
  bwd.Run(data.data(), work.data());
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_NEAR(data[j].real() / n, x[j].real(), 1e-6) << j;
    EXPECT_NEAR(data[j].imag() / n, x[j].imag(), 1e-6) << j;
  }
}

}  // namespace
}  // namespace kiln::runtime::testing
