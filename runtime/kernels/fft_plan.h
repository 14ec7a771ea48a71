// One-dimensional complex discrete Fourier transforms of any length n,
// eight lines at a time:
//
//   out[k] = sum_j in[j] * exp(sign * 2*pi*i * j*k / n),  sign = -1 or +1
//
// unnormalized, as ATen's _fft_c2c computes each dimension before scaling.
// Lengths whose prime factors are all small run a self-sorting (Stockham)
// mixed-radix FFT; a length with a larger prime factor runs Bluestein's
// chirp convolution through a power-of-two FFT, so every length costs
// O(n log n). Twiddles are computed in double precision and rounded once.
//
// The eight lines are transformed together, split into real and imaginary
// planes with the lines innermost (value j of line b at [j * 8 + b]): every
// butterfly is then the same arithmetic on one AVX2 vector per plane.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::runtime {

using Complex = std::complex<float>;

class FftPlan {
 public:
  static constexpr int kLines = 8;

  // n >= 1; sign -1 is ATen's forward transform, +1 its backward one.
  FftPlan(int64_t n, int sign);
  ~FftPlan();
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  int64_t size() const { return n_; }
  // Floats of work memory RunLines needs besides the data.
  int64_t WorkFloats() const;
  // Transforms kLines lines in place: re and im hold n * kLines floats
  // each (value j of line b at [j * kLines + b]); work holds WorkFloats()
  // floats. None of them overlap.
  void RunLines(float* re, float* im, float* work) const;

 private:
  struct Stage;
  struct Bluestein;
  void RunStockham(float* re, float* im, float* work) const;
  void RunBluestein(float* re, float* im, float* work) const;

  int64_t n_;
  int sign_;
  std::vector<Stage> stages_;
  std::unique_ptr<Bluestein> bluestein_;
};

}  // namespace kiln::runtime
