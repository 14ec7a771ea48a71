#include "runtime/kernels/fft_plan.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace kiln::runtime {
namespace {

constexpr int64_t kL = FftPlan::kLines;
static_assert(kL == 8, "one AVX2 vector of floats per plane");

// Prime factors up to this run as a direct butterfly of O(p^2) operations;
// a length with a larger one goes through Bluestein.
constexpr int kMaxDirectRadix = 61;

// exp(sign * 2*pi*i * num / den), with num reduced modulo den first so that
// large products keep double precision.
Complex Root(int sign, int64_t num, int64_t den) {
  num %= den;
  const double angle = sign * 2.0 * M_PI * static_cast<double>(num) / static_cast<double>(den);
  return Complex(static_cast<float>(std::cos(angle)), static_cast<float>(std::sin(angle)));
}

// The same complex value in each of the eight lines, or eight values.
struct V {
  __m256 r, i;
};
inline V Splat(Complex c) { return {_mm256_set1_ps(c.real()), _mm256_set1_ps(c.imag())}; }
inline V Load(const float* re, const float* im, int64_t j) {
  return {_mm256_loadu_ps(re + j * kL), _mm256_loadu_ps(im + j * kL)};
}
inline void Store(float* re, float* im, int64_t j, V v) {
  _mm256_storeu_ps(re + j * kL, v.r);
  _mm256_storeu_ps(im + j * kL, v.i);
}
inline V Add(V a, V b) { return {_mm256_add_ps(a.r, b.r), _mm256_add_ps(a.i, b.i)}; }
inline V Sub(V a, V b) { return {_mm256_sub_ps(a.r, b.r), _mm256_sub_ps(a.i, b.i)}; }
inline V Mul(V a, V w) {
  return {_mm256_fmsub_ps(a.r, w.r, _mm256_mul_ps(a.i, w.i)),
          _mm256_fmadd_ps(a.r, w.i, _mm256_mul_ps(a.i, w.r))};
}
// i * sign * a
inline V RotateQuarter(V a, int sign) {
  const __m256 zero = _mm256_setzero_ps();
  return sign > 0 ? V{_mm256_sub_ps(zero, a.i), a.r} : V{a.i, _mm256_sub_ps(zero, a.r)};
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
// value s + (n/L) * k holds the L-point transform, at k, of the samples
// x[s + (n/L) * j]; after it, the same holds for L' = L * p. With
// m = n / L' and s = s' + m * r:
//   Y'[s'][k + L*q] = sum_r w_p^(r*q) * (w_L'^(r*k) * Y[s' + m*r][k]).
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
  // The kernel's transform, as line 0 of a block.
  std::vector<float> re(b->m * kL, 0.0f), im(b->m * kL, 0.0f), work(b->forward->WorkFloats());
  for (int64_t j = 0; j < n; ++j) {
    const Complex c = std::conj(b->chirp[j]);
    re[j * kL] = c.real();
    im[j * kL] = c.imag();
    if (j > 0) {
      re[(b->m - j) * kL] = c.real();
      im[(b->m - j) * kL] = c.imag();
    }
  }
  b->forward->RunLines(re.data(), im.data(), work.data());
  const float inv_m = 1.0f / static_cast<float>(b->m);
  b->kernel.resize(b->m);
  for (int64_t j = 0; j < b->m; ++j) b->kernel[j] = Complex(re[j * kL] * inv_m, im[j * kL] * inv_m);
  bluestein_ = std::move(b);
}

FftPlan::~FftPlan() = default;

int64_t FftPlan::WorkFloats() const {
  if (bluestein_ == nullptr) return 2 * n_ * kL;
  // The convolution's two planes, and the power-of-two plan's work.
  return 4 * bluestein_->m * kL;
}

void FftPlan::RunLines(float* re, float* im, float* work) const {
  if (bluestein_ != nullptr) {
    RunBluestein(re, im, work);
  } else {
    RunStockham(re, im, work);
  }
}

void FftPlan::RunStockham(float* re, float* im, float* work) const {
  float* src_re = re;
  float* src_im = im;
  float* dst_re = work;
  float* dst_im = work + n_ * kL;
  for (const Stage& st : stages_) {
    const int p = st.p;
    const int64_t L = st.L, m = st.m;
    const Complex* tw = st.twiddles.data();
    for (int64_t k = 0; k < L; ++k) {
      // Input values m*p*k + m*r + s', output values m*k + m*L*q + s'.
      const float* ir = src_re + m * p * k * kL;
      const float* ii = src_im + m * p * k * kL;
      float* orr = dst_re + m * k * kL;
      float* oi = dst_im + m * k * kL;
      const int64_t ml = m * L;
      if (p == 4) {
        const V w1 = Splat(tw[k]), w2 = Splat(tw[L + k]), w3 = Splat(tw[2 * L + k]);
        for (int64_t s = 0; s < m; ++s) {
          const V a0 = Load(ir, ii, s), a1 = Mul(Load(ir, ii, m + s), w1),
                  a2 = Mul(Load(ir, ii, 2 * m + s), w2), a3 = Mul(Load(ir, ii, 3 * m + s), w3);
          const V e0 = Add(a0, a2), e1 = Sub(a0, a2);
          const V o0 = Add(a1, a3), o1 = RotateQuarter(Sub(a1, a3), sign_);
          Store(orr, oi, s, Add(e0, o0));
          Store(orr, oi, ml + s, Add(e1, o1));
          Store(orr, oi, 2 * ml + s, Sub(e0, o0));
          Store(orr, oi, 3 * ml + s, Sub(e1, o1));
        }
      } else if (p == 2) {
        const V w1 = Splat(tw[k]);
        for (int64_t s = 0; s < m; ++s) {
          const V a0 = Load(ir, ii, s), a1 = Mul(Load(ir, ii, m + s), w1);
          Store(orr, oi, s, Add(a0, a1));
          Store(orr, oi, ml + s, Sub(a0, a1));
        }
      } else if (p == 3) {
        const V w1 = Splat(tw[k]), w2 = Splat(tw[L + k]);
        const __m256 half = _mm256_set1_ps(0.5f);
        const __m256 h = _mm256_set1_ps(static_cast<float>(sign_ * std::sqrt(3.0) / 2.0));
        for (int64_t s = 0; s < m; ++s) {
          const V a0 = Load(ir, ii, s), a1 = Mul(Load(ir, ii, m + s), w1),
                  a2 = Mul(Load(ir, ii, 2 * m + s), w2);
          const V t1 = Add(a1, a2);
          const V t2 = {_mm256_fnmadd_ps(half, t1.r, a0.r), _mm256_fnmadd_ps(half, t1.i, a0.i)};
          const V d = Sub(a1, a2);
          // i * h * (a1 - a2)
          const V t3 = {_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(h, d.i)),
                        _mm256_mul_ps(h, d.r)};
          Store(orr, oi, s, Add(a0, t1));
          Store(orr, oi, ml + s, Add(t2, t3));
          Store(orr, oi, 2 * ml + s, Sub(t2, t3));
        }
      } else {
        V w[kMaxDirectRadix], roots[kMaxDirectRadix], a[kMaxDirectRadix];
        for (int r = 1; r < p; ++r) w[r] = Splat(tw[(r - 1) * L + k]);
        for (int t = 0; t < p; ++t) roots[t] = Splat(st.roots[t]);
        for (int64_t s = 0; s < m; ++s) {
          a[0] = Load(ir, ii, s);
          for (int r = 1; r < p; ++r) a[r] = Mul(Load(ir, ii, r * m + s), w[r]);
          for (int q = 0; q < p; ++q) {
            V acc = a[0];
            int t = q;  // r * q mod p
            for (int r = 1; r < p; ++r) {
              acc = Add(acc, Mul(a[r], roots[t]));
              t += q;
              if (t >= p) t -= p;
            }
            Store(orr, oi, q * ml + s, acc);
          }
        }
      }
    }
    std::swap(src_re, dst_re);
    std::swap(src_im, dst_im);
  }
  if (src_re != re) {
    std::memcpy(re, src_re, static_cast<size_t>(n_ * kL) * sizeof(float));
    std::memcpy(im, src_im, static_cast<size_t>(n_ * kL) * sizeof(float));
  }
}

void FftPlan::RunBluestein(float* re, float* im, float* work) const {
  const Bluestein& b = *bluestein_;
  float* ar = work;
  float* ai = work + b.m * kL;
  float* sub_work = work + 2 * b.m * kL;
  for (int64_t j = 0; j < n_; ++j) Store(ar, ai, j, Mul(Load(re, im, j), Splat(b.chirp[j])));
  std::fill(ar + n_ * kL, ar + b.m * kL, 0.0f);
  std::fill(ai + n_ * kL, ai + b.m * kL, 0.0f);
  b.forward->RunLines(ar, ai, sub_work);
  for (int64_t j = 0; j < b.m; ++j) Store(ar, ai, j, Mul(Load(ar, ai, j), Splat(b.kernel[j])));
  b.backward->RunLines(ar, ai, sub_work);
  for (int64_t k = 0; k < n_; ++k) Store(re, im, k, Mul(Load(ar, ai, k), Splat(b.chirp[k])));
}

}  // namespace kiln::runtime
