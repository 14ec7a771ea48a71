// One-dimensional complex discrete Fourier transforms of any length n:
//
//   out[k] = sum_j in[j] * exp(sign * 2*pi*i * j*k / n),  sign = -1 or +1
//
// unnormalized, as ATen's _fft_c2c computes each dimension before scaling.
// Lengths whose prime factors are all small run a self-sorting (Stockham)
// mixed-radix FFT; a length with a larger prime factor runs Bluestein's
// chirp convolution through a power-of-two FFT, so every length costs
// O(n log n). Twiddles are computed in double precision and rounded once.
#pragma once

#include <complex>
#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::runtime {

using Complex = std::complex<float>;

class FftPlan {
 public:
  // n >= 1; sign -1 is ATen's forward transform, +1 its backward one.
  FftPlan(int64_t n, int sign);
  ~FftPlan();
  FftPlan(const FftPlan&) = delete;
  FftPlan& operator=(const FftPlan&) = delete;

  int64_t size() const { return n_; }
  // Complex values of work memory Run needs besides the data.
  int64_t WorkSize() const;
  // Transforms data[0, n) in place; work holds WorkSize() values and does
  // not overlap data.
  void Run(Complex* data, Complex* work) const;

 private:
  struct Stage;
  struct Bluestein;
  void RunStockham(Complex* data, Complex* work) const;
  void RunBluestein(Complex* data, Complex* work) const;

  int64_t n_;
  int sign_;
  std::vector<Stage> stages_;
  std::unique_ptr<Bluestein> bluestein_;
};

}  // namespace kiln::runtime
