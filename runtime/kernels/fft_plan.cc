#include "runtime/kernels/fft_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace kiln::runtime {
namespace {

// Prime factors up to this run as a direct butterfly of O(p^2) operations;
// a length with a larger one goes through Bluestein.
constexpr int64_t kMaxDirectRadix = 61;

// exp(sign * 2*pi*i * num / den), with num reduced modulo den first so that
// large products keep double precision.
Complex Root(int sign, int64_t num, int64_t den) {
  num %= den;
  const double angle = sign * 2.0 * M_PI * static_cast<double>(num) / static_cast<double>(den);
  return Complex(static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle)));
}

// Plain complex arithmetic: std::complex's operator* also handles infinite
// and NaN parts specially (C Annex G), which costs a library call here and
// which ATen's FFT libraries do not do either.
inline Complex Mul(Complex a, Complex b) {
  return Complex(a.real() * b.real() - a.imag() * b.imag(),
                 a.real() * b.imag() + a.imag() * b.real());
}
inline Complex Add(Complex a, Complex b) { return Complex(a.real() + b.real(), a.imag() + b.imag()); }
inline Complex Sub(Complex a, Complex b) { return Complex(a.real() - b.real(), a.imag() - b.imag()); }
// i * sign * a
inline Complex RotateQuarter(Complex a, int sign) {
  return sign > 0 ? Complex(-a.imag(), a.real()) : Complex(a.imag(), -a.real());
}

// The radices of n, fours first; empty when n has a prime factor above
// kMaxDirectRadix.
std::vector<int> Factor(int64_t n) {
  std::vector<int> radices;
  while (n % 4 == 0) {
    radices.push_back(4);
    n /= 4;
  }
  for (int64_t p = 2; n > 1; ++p) {
    if (p > kMaxDirectRadix) return {};
    while (n % p == 0) {
      radices.push_back(static_cast<int>(p));
      n /= p;
    }
  }
  return radices;
}

}  // namespace

// One radix-p pass. Before it, for every s in [0, n/L) and k in [0, L),
// src[s + (n/L) * k] holds the L-point transform, at k, of the samples
// x[s + (n/L) * j]; after it, dst holds the same for L' = L * p. With
// m = n / L' and s = s' + m * r:
//   Y'[s'][k + L*q] = sum_r w_p^(r*q) * (w_L'^(r*k) * Y[s' + m*r][k]).
// Reads and writes run along s', contiguous in both arrays.
struct FftPlan::Stage {
  int p = 0;
  int64_t L = 0, m = 0;
  std::vector<Complex> twiddles;  // [r - 1][k]: w_L'^(r*k), r in [1, p)
  std::vector<Complex> roots;     // w_p^t, t in [0, p)
};

struct FftPlan::Bluestein {
  int64_t m = 0;
  std::unique_ptr<FftPlan> forward, backward;
  std::vector<Complex> chirp;   // exp(sign * pi*i * j^2 / n), j in [0, n)
  std::vector<Complex> kernel;  // FFT_m of conj(chirp) wrapped around, / m
};

FftPlan::FftPlan(int64_t n, int sign) : n_(n), sign_(sign) {
  const std::vector<int> radices = Factor(n);
  if (n == 1 || !radices.empty()) {
    int64_t L = 1;
    for (int p : radices) {
      Stage st;
      st.p = p;
      st.L = L;
      st.m = n / (L * p);
      st.twiddles.resize(static_cast<size_t>((p - 1) * L));
      for (int r = 1; r < p; ++r) {
        for (int64_t k = 0; k < L; ++k) st.twiddles[(r - 1) * L + k] = Root(sign, r * k, L * p);
      }
      st.roots.resize(p);
      for (int t = 0; t < p; ++t) st.roots[t] = Root(sign, t, p);
      stages_.push_back(std::move(st));
      L *= p;
    }
    return;
  }
  // Bluestein: j*k = (j^2 + k^2 - (k - j)^2) / 2, so with c_t = chirp[t],
  // X[k] = c_k * sum_j (x_j * c_j) * conj(c_(k-j)): a convolution, done
  // cyclically over m >= 2n - 1 points.
  auto b = std::make_unique<Bluestein>();
  b->m = 1;
  while (b->m < 2 * n - 1) b->m *= 2;
  b->forward = std::make_unique<FftPlan>(b->m, -1);
  b->backward = std::make_unique<FftPlan>(b->m, +1);
  b->chirp.resize(n);
  for (int64_t j = 0; j < n; ++j) {
    // j^2 modulo 2n (exp(pi*i * t / n) has period 2n), without overflow.
    const int64_t sq = static_cast<int64_t>(
        (static_cast<unsigned __int128>(j) * static_cast<unsigned __int128>(j)) %
        static_cast<unsigned __int128>(2 * n));
    const double angle = sign * M_PI * static_cast<double>(sq) / static_cast<double>(n);
    b->chirp[j] = Complex(static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle)));
  }
  b->kernel.assign(b->m, Complex(0, 0));
  for (int64_t j = 0; j < n; ++j) {
    b->kernel[j] = std::conj(b->chirp[j]);
    if (j > 0) b->kernel[b->m - j] = std::conj(b->chirp[j]);
  }
  std::vector<Complex> work(b->forward->WorkSize());
  b->forward->Run(b->kernel.data(), work.data());
  const float inv_m = 1.0f / static_cast<float>(b->m);
  for (Complex& v : b->kernel) v *= inv_m;
  bluestein_ = std::move(b);
}

FftPlan::~FftPlan() = default;

int64_t FftPlan::WorkSize() const {
  if (bluestein_ == nullptr) return n_;
  return 2 * bluestein_->m;
}

void FftPlan::Run(Complex* data, Complex* work) const {
  if (bluestein_ != nullptr) {
    RunBluestein(data, work);
  } else {
    RunStockham(data, work);
  }
}

void FftPlan::RunStockham(Complex* data, Complex* work) const {
  Complex* src = data;
  Complex* dst = work;
  for (const Stage& st : stages_) {
    const int p = st.p;
    const int64_t L = st.L, m = st.m;
    const Complex* tw = st.twiddles.data();
    for (int64_t k = 0; k < L; ++k) {
      const Complex* in = src + m * p * k;  // + m * r + s'
      Complex* out = dst + m * k;           // + m * L * q + s'
      if (p == 2) {
        const Complex w1 = tw[k];
        for (int64_t s = 0; s < m; ++s) {
          const Complex a0 = in[s], a1 = Mul(in[m + s], w1);
          out[s] = Add(a0, a1);
          out[m * L + s] = Sub(a0, a1);
        }
      } else if (p == 4) {
        const Complex w1 = tw[k], w2 = tw[L + k], w3 = tw[2 * L + k];
        for (int64_t s = 0; s < m; ++s) {
          const Complex a0 = in[s], a1 = Mul(in[m + s], w1), a2 = Mul(in[2 * m + s], w2),
                        a3 = Mul(in[3 * m + s], w3);
          const Complex e0 = Add(a0, a2), e1 = Sub(a0, a2);
          const Complex o0 = Add(a1, a3), o1 = RotateQuarter(Sub(a1, a3), sign_);
          out[s] = Add(e0, o0);
          out[m * L + s] = Add(e1, o1);
          out[2 * m * L + s] = Sub(e0, o0);
          out[3 * m * L + s] = Sub(e1, o1);
        }
      } else if (p == 3) {
        const Complex w1 = tw[k], w2 = tw[L + k];
        const float h = static_cast<float>(sign_ * std::sqrt(3.0) / 2.0);
        for (int64_t s = 0; s < m; ++s) {
          const Complex a0 = in[s], a1 = Mul(in[m + s], w1), a2 = Mul(in[2 * m + s], w2);
          const Complex t1 = Add(a1, a2);
          const Complex t2(a0.real() - 0.5f * t1.real(), a0.imag() - 0.5f * t1.imag());
          const Complex d = Sub(a1, a2);
          const Complex t3(-h * d.imag(), h * d.real());  // i * h * (a1 - a2)
          out[s] = Add(a0, t1);
          out[m * L + s] = Add(t2, t3);
          out[2 * m * L + s] = Sub(t2, t3);
        }
      } else {
        Complex a[kMaxDirectRadix];
        const Complex* roots = st.roots.data();
        for (int64_t s = 0; s < m; ++s) {
          a[0] = in[s];
          for (int r = 1; r < p; ++r) a[r] = Mul(in[r * m + s], tw[(r - 1) * L + k]);
          for (int q = 0; q < p; ++q) {
            float re = 0, im = 0;
            int t = 0;  // r * q mod p
            for (int r = 0; r < p; ++r) {
              const Complex v = Mul(a[r], roots[t]);
              re += v.real();
              im += v.imag();
              t += q;
              if (t >= p) t -= p;
            }
            out[q * m * L + s] = Complex(re, im);
          }
        }
      }
    }
    std::swap(src, dst);
  }
  if (src != data) std::memcpy(data, src, static_cast<size_t>(n_) * sizeof(Complex));
}

void FftPlan::RunBluestein(Complex* data, Complex* work) const {
  const Bluestein& b = *bluestein_;
  Complex* a = work;
  Complex* sub_work = work + b.m;
  for (int64_t j = 0; j < n_; ++j) a[j] = Mul(data[j], b.chirp[j]);
  std::fill(a + n_, a + b.m, Complex(0, 0));
  b.forward->Run(a, sub_work);
  for (int64_t j = 0; j < b.m; ++j) a[j] = Mul(a[j], b.kernel[j]);
  b.backward->Run(a, sub_work);
  for (int64_t k = 0; k < n_; ++k) data[k] = Mul(a[k], b.chirp[k]);
}

}  // namespace kiln::runtime
