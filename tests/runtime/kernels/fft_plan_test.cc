// Tests FftPlan (fft_plan.cc) against the DFT's definition summed in double
// precision, eight different lines at once: lengths of every radix path (4,
// 2, 3, the direct radices up to 61) and of Bluestein's (a prime factor
// above 61), both signs.
#include "runtime/kernels/fft_plan.h"

#include <cmath>
#include <complex>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/random_floats.h"

namespace kiln::runtime::testing {
namespace {

using CD = std::complex<double>;

// The definition, summed in double precision over a table of the n roots.
std::vector<CD> Dft(const std::vector<Complex>& x, int sign) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<CD> roots(n);
  for (int64_t t = 0; t < n; ++t) roots[t] = std::polar(1.0, sign * 2.0 * M_PI * t / n);
  std::vector<CD> out(n);
  for (int64_t k = 0; k < n; ++k) {
    CD sum = 0;
    int64_t t = 0;  // j * k mod n
    for (int64_t j = 0; j < n; ++j) {
      sum += CD(x[j].real(), x[j].imag()) * roots[t];
      t += k;
      if (t >= n) t -= n;
    }
    out[k] = sum;
  }
  return out;
}

// max |got - want| over max |want|, over eight lines of random values
// transformed together.
double RelError(int64_t n, int sign, uint32_t seed) {
  constexpr int kL = FftPlan::kLines;
  const std::vector<float> r = RandomFloats(2 * n * kL, seed);
  FftPlan plan(n, sign);
  EXPECT_EQ(plan.size(), n);
  std::vector<float> re(n * kL), im(n * kL), work(plan.WorkFloats());
  for (int64_t i = 0; i < n * kL; ++i) {
    re[i] = r[2 * i];
    im[i] = r[2 * i + 1];
  }
  std::vector<std::vector<Complex>> lines(kL, std::vector<Complex>(n));
  for (int b = 0; b < kL; ++b) {
    for (int64_t j = 0; j < n; ++j) lines[b][j] = Complex(re[j * kL + b], im[j * kL + b]);
  }
  plan.RunLines(re.data(), im.data(), work.data());
  double err = 0, scale = 0;
  for (int b = 0; b < kL; ++b) {
    const std::vector<CD> want = Dft(lines[b], sign);
    for (int64_t k = 0; k < n; ++k) {
      err = std::max(err, std::abs(CD(re[k * kL + b], im[k * kL + b]) - want[k]));
      scale = std::max(scale, std::abs(want[k]));
    }
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
  constexpr int kL = FftPlan::kLines;
  const int64_t n = 360;
  const std::vector<float> x = RandomFloats(2 * n * kL, 3);
  FftPlan fwd(n, -1), bwd(n, 1);
  std::vector<float> re(x.begin(), x.begin() + n * kL), im(x.begin() + n * kL, x.end());
  std::vector<float> work(std::max(fwd.WorkFloats(), bwd.WorkFloats()));
  fwd.RunLines(re.data(), im.data(), work.data());
  bwd.RunLines(re.data(), im.data(), work.data());
  for (int64_t i = 0; i < n * kL; ++i) {
    EXPECT_NEAR(re[i] / n, x[i], 1e-6) << i;
    EXPECT_NEAR(im[i] / n, x[n * kL + i], 1e-6) << i;
  }
}

}  // namespace
}  // namespace kiln::runtime::testing
