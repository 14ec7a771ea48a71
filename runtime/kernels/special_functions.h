// Scalar special functions matching PyTorch's eager CPU float32 results.
//
// Every function takes and returns double and is meant to be rounded to float by the
// caller. The algorithms are standard series / asymptotic expansions / continued
// fractions evaluated in double, so they are usually more accurate than ATen's float
// kernels; where ATen returns a specific value for NaN, +-inf, zero, poles or
// out-of-domain arguments, the same value is returned here (see the comments).
// All functions are pure (no global or static mutable state) and thread-safe.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::runtime::special {
namespace detail {

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kEulerGamma = 0.57721566490153286061;
inline constexpr double kSqrtPi = 1.77245385090551602730;
inline constexpr double kSqrt2 = 1.41421356237309504880;
inline constexpr double kLnSqrt2Pi = 0.91893853320467274178;
inline constexpr double kAi0 = 0.35502805388781723926;       // Ai(0)
inline constexpr double kMinusAip0 = 0.25881940379280679840;  // -Ai'(0)
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kEps = 1e-17;  // series truncation threshold (below double ulp)

// B_{2k} / (2k (2k-1)), k = 1..8: coefficients of Stirling's series for ln Gamma.
inline constexpr double kStirling[] = {
    1.0 / 12.0,           -1.0 / 360.0,         1.0 / 1260.0,
    -1.0 / 1680.0,        1.0 / 1188.0,         -691.0 / 360360.0,
    1.0 / 156.0,          -3617.0 / 122400.0,
};

// B_{2j} / (2j)!, j = 1..12: Euler-Maclaurin correction coefficients.
inline constexpr double kEulerMaclaurin[] = {
    8.33333333333333287e-02,  -1.38888888888888894e-03, 3.30687830687830710e-05,
    -8.26719576719576754e-07, 2.08767569878681002e-08,  -5.28419013868749322e-10,
    1.33825365306846789e-11,  -3.38968029632258272e-13, 8.58606205627784517e-15,
    -2.17486869855806192e-16, 5.50900282836022953e-18,  -1.39544646858125223e-19,
};

// zeta(k) - 1 for k = 2..30 (Taylor coefficients of ln Gamma(1+a) beyond a - log1p(a)).
inline constexpr double kZetaMinusOne[] = {
    6.44934066848226406e-01, 2.02056903159594292e-01, 8.23232337111381857e-02,
    3.69277551433699266e-02, 1.73430619844491402e-02, 8.34927738192282713e-03,
    4.07735619794433960e-03, 2.00839282608221426e-03, 9.94575127818085256e-04,
    4.94188604119464529e-04, 2.46086553308048320e-04, 1.22713347578489145e-04,
    6.12481350587048277e-05, 3.05882363070204933e-05, 1.52822594086518710e-05,
    7.63719763789976257e-06, 3.81729326499984022e-06, 1.90821271655393897e-06,
    9.53962033872796212e-07, 4.76932986787806447e-07, 2.38450502727733004e-07,
    1.19219925965311064e-07, 5.96081890512594801e-08, 2.98035035146522793e-08,
    1.49015548283650427e-08, 7.45071178983543006e-09, 3.72533402478845728e-09,
    1.86265972351304914e-09, 9.31327432419668166e-10,
};

// Taylor coefficients in mu = x/a - 1 of Temme's c0(eta) and c1(eta) (uniform incomplete
// gamma expansion, DLMF 8.12), derived from c0 = 1/mu - 1/eta and
// c1 = 1/eta^3 - 1/mu^3 - 1/mu^2 - 1/(12 mu) with eta^2/2 = mu - log(1+mu).
inline constexpr double kTemmeC0[] = {
    -3.33333333333333315e-01, 8.33333333333333287e-02,  -4.25925925925925916e-02,
    2.72376543209876532e-02,  -1.94775132275132289e-02, 1.48962007642563198e-02,
    -1.19154786400156778e-02, 9.84223052003723245e-03,  -8.32809351218023221e-03,
    7.18034838506985927e-03,
};
inline constexpr double kTemmeC1[] = {
    -1.85185185185185192e-03, -3.47222222222222203e-03, 3.80291005291005270e-03,
    -3.42904908877131103e-03, 2.98813198118753681e-03,  -2.59725819983343134e-03,
    2.27086554281877512e-03,  -2.00161263181311902e-03, 1.77894274461659510e-03,
};

// Horner evaluation of sum_k c[k] t^k.
template <int N>
inline double Poly(const double (&c)[N], double t) {
  double r = 0.0;
  for (int k = N - 1; k >= 0; --k) r = r * t + c[k];
  return r;
}

// ln Gamma(x) for x > 0: shift to x >= 8 by the recurrence, then Stirling's series.
inline double LogGammaPositive(double x) {
  double prod = 1.0;
  while (x < 8.0) {
    prod *= x;
    x += 1.0;
  }
  const double inv = 1.0 / x;
  const double series = inv * Poly(kStirling, inv * inv);
  return (x - 0.5) * std::log(x) - x + kLnSqrt2Pi + series - std::log(prod);
}

// ln Gamma(1+a) for |a| <= 0.5 via its Taylor series -gamma*a + sum (-a)^k zeta(k)/k,
// keeping full relative accuracy as a -> 0.
inline double LogGamma1pSmall(double a) {
  double sum = 0.0;
  double p = -a;
  for (int k = 2; k <= 30; ++k) {
    p *= -a;
    sum += kZetaMinusOne[k - 2] * p / k;
  }
  return -kEulerGamma * a + (a - std::log1p(a)) + sum;
}

// ln Gamma(1+a) for a >= 0.
inline double LogGamma1p(double a) {
  return a <= 0.5 ? LogGamma1pSmall(a) : LogGammaPositive(a + 1.0);
}

// zeta(s, q) * q^s for finite q > 0 and s > 1: direct summation until the Euler-Maclaurin
// tail (with Bernoulli corrections) converges; the scaling keeps it finite for huge s.
inline double HurwitzZetaScaled(double s, double q) {
  const double w_min = std::fmax(10.0, s + 10.0);
  double sum = 0.0;
  double w = q;
  int64_t n = 0;
  double ratio = 1.0;  // (q / (q + n))^s
  while (w < w_min) {
    sum += ratio;
    if (ratio * (1.0 + w / (s - 1.0)) <= kEps * sum) return sum;
    ++n;
    w = q + static_cast<double>(n);
    ratio = std::exp(-s * std::log1p(static_cast<double>(n) / q));
  }
  double tail = w / (s - 1.0) + 0.5;
  double fac = s / w;  // (s)_{2j-1} / w^{2j-1}
  for (int j = 0; j < 12; ++j) {
    const double t = kEulerMaclaurin[j] * fac;
    tail += t;
    if (std::fabs(t) <= kEps * std::fabs(tail)) break;
    fac *= (s + 2 * j + 1) * (s + 2 * j + 2) / (w * w);
  }
  return sum + ratio * tail;
}

// zeta(s, q) for finite q > 0 and s > 1 (s may be +inf when q <= 1).
inline double HurwitzZetaPositive(double s, double q) {
  const double z = HurwitzZetaScaled(s, q);
  if (q == 1.0) return z;
  return std::exp(std::log(z) - s * std::log(q));
}

// zeta(s, q) for q < 0 non-integer and integer s > 1: the K = -floor(q) negative terms
// sum to (-1)^s [zeta(s, g) - zeta(s, 1 - q)], g = 1 - frac(q), and the rest is
// zeta(s, frac(q)). The two pole-nearest sums are combined first so that for odd s
// their (often exact) cancellation happens before the small zeta(s, 1 - q) is added.
inline double HurwitzZetaNegative(double s, double q) {
  const double fl = std::floor(q);
  const double f = q - fl;            // q + K in (0, 1)
  const double g = -q - (-fl - 1.0);  // -(q + K - 1) in (0, 1), exact
  const double sign = std::fmod(s, 2.0) == 0.0 ? 1.0 : -1.0;
  return (HurwitzZetaPositive(s, f) + sign * HurwitzZetaPositive(s, g)) -
         sign * HurwitzZetaPositive(s, 1.0 - q);
}

}  // namespace detail

// Digamma psi(x) (aten.digamma): recurrence up to x >= 10 then the Bernoulli asymptotic
// series; reflection psi(1-x) - pi/tan(pi x) for x < 0. psi(+-0) = -+inf, NaN at
// negative integers and -inf (as ATen).
inline double Digamma(double x) {
  using namespace detail;
  if (x == 0.0) return std::copysign(kInf, -x);
  if (x < 0.0) {
    if (x == std::trunc(x)) return kNaN;
    const double r = x - std::trunc(x);  // tan has period pi: use the exact fraction
    return Digamma(1.0 - x) - kPi / std::tan(kPi * r);
  }
  if (std::isnan(x) || std::isinf(x)) return x;
  double acc = 0.0;
  while (x < 10.0) {
    acc -= 1.0 / x;
    x += 1.0;
  }
  const double z = 1.0 / (x * x);
  // sum_k B_2k / (2k x^2k), k = 1..6
  const double series =
      z * (1.0 / 12 - z * (1.0 / 120 - z * (1.0 / 252 - z * (1.0 / 240 - z * (1.0 / 132 - z * (691.0 / 32760))))));
  return acc + std::log(x) - 0.5 / x - series;
}

// Hurwitz zeta(x, q) (aten.special_zeta): Euler-Maclaurin summation; for q < 0 the
// negative terms are re-expressed through positive arguments. Edge values follow ATen:
// inf at x == 1 and at non-positive integer q, NaN for x < 1, for q < 0 with non-integer
// x, and for q = +inf or (x > ~2.5e13, q > 1) where ATen's summation produces 0*inf.
inline double Zeta(double x, double q) {
  using namespace detail;
  if (x == 1.0) return kInf;
  if (x < 1.0) return kNaN;
  if (q <= 0.0) {
    if (q == std::floor(q)) return kInf;
    if (x != std::floor(x)) return kNaN;
    if (std::isinf(x)) return kInf;
    return HurwitzZetaNegative(x, q);
  }
  if (std::isnan(x) || std::isnan(q) || std::isinf(q)) return kNaN;
  if (std::isinf(x)) return q < 1.0 ? kInf : (q == 1.0 ? 1.0 : kNaN);
  // ATen: once every summed term q^-x has underflowed and its Euler-Maclaurin coefficient
  // x(x+1)...(x+22) overflows (x > ~2.5257e13), it evaluates inf * 0 and returns NaN.
  if (q > 1.0 && x * std::log(q) > 746.0 && 23.0 * std::log(x) > 709.782712893384) return kNaN;
  return HurwitzZetaPositive(x, q);
}

// Polygamma psi^(n)(x) (aten.polygamma(n, x)): digamma for n = 0, otherwise
// (-1)^(n+1) n! zeta(n+1, x) evaluated in log space so n! never overflows alone.
// n < 0 (an ATen error) gives NaN. Poles: +inf for n = 1 (ATen's float sin() gives large
// finite values at negative integers), (-1)^(n+1) inf for n >= 2 (as ATen). psi^(1)(+inf) = 0,
// psi^(1)(-inf) = NaN; psi^(n>=2)(+inf) = NaN (ATen's 0*inf), psi^(n>=2)(-inf) is a pole.
inline double Polygamma(int64_t n, double x) {
  using namespace detail;
  if (n < 0) return kNaN;
  if (n == 0) return Digamma(x);
  if (std::isnan(x)) return x;
  const double sign = (n % 2 == 1) ? 1.0 : -1.0;
  if (n == 1 && std::isinf(x)) return x > 0 ? 0.0 : kNaN;
  if (x == kInf) return kNaN;
  if (x <= 0.0 && x == std::floor(x)) return sign * kInf;
  const double s = static_cast<double>(n) + 1.0;
  const double log_fact = LogGammaPositive(s);
  if (x > 0.0) {
    return sign * std::exp(log_fact - s * std::log(x) + std::log(HurwitzZetaScaled(s, x)));
  }
  const double z = HurwitzZetaNegative(s, x);
  return sign * std::copysign(std::exp(log_fact + std::log(std::fabs(z))), z);
}

namespace detail {

// Solves erfc(x) = z for 0 < z <= 1 (x >= 0): Winitzki's closed-form guess, then Halley.
inline double ErfcInvUpper(double z) {
  constexpr double a = 0.147;
  const double lg = std::log(z * (2.0 - z));  // ln(1 - y^2), y = 1 - z
  const double c = 2.0 / (kPi * a) + 0.5 * lg;
  double x = std::sqrt(std::fmax(0.0, std::sqrt(c * c - lg / a) - c));
  for (int i = 0; i < 8; ++i) {
    const double fp = -2.0 / kSqrtPi * std::exp(-x * x);
    const double t = (std::erfc(x) - z) / fp;
    const double dx = t / (1.0 + x * t);
    x -= dx;
    if (std::fabs(dx) <= 1e-15 * std::fabs(x)) break;
  }
  return x;
}

// Solves erf(x) = y for |y| < 0.5: series guess, then Halley (relative accuracy near 0).
inline double ErfInvCentral(double y) {
  double x = 0.5 * kSqrtPi * y * (1.0 + kPi * y * y / 12.0);
  for (int i = 0; i < 8; ++i) {
    const double fp = 2.0 / kSqrtPi * std::exp(-x * x);
    const double t = (std::erf(x) - y) / fp;
    const double dx = t / (1.0 + x * t);
    x -= dx;
    if (std::fabs(dx) <= 1e-15 * std::fabs(x)) break;
  }
  return x;
}

}  // namespace detail

// Inverse error function (aten.erfinv): Halley iteration on erf (|y| < 0.5) or on erfc
// (|y| >= 0.5, where 1-|y| is exact) from a closed-form initial guess. +-1 -> +-inf,
// |y| > 1 -> NaN.
inline double Erfinv(double y) {
  using namespace detail;
  if (std::isnan(y)) return y;
  const double ay = std::fabs(y);
  if (ay > 1.0) return kNaN;
  if (ay == 1.0) return std::copysign(kInf, y);
  if (ay < 0.5) return ErfInvCentral(y);
  return std::copysign(ErfcInvUpper(1.0 - ay), y);
}

// Inverse standard normal CDF (aten.special_ndtri): sqrt(2) erfinv(2p-1) near the centre,
// -sqrt(2) erfcinv(2p) in the tails so tiny p keep full precision. 0 -> -inf, 1 -> inf,
// outside [0, 1] -> NaN.
inline double Ndtri(double p) {
  using namespace detail;
  if (std::isnan(p)) return p;
  if (p < 0.0 || p > 1.0) return kNaN;
  if (p == 0.0) return -kInf;
  if (p == 1.0) return kInf;
  if (p >= 0.25 && p <= 0.75) return kSqrt2 * ErfInvCentral(2.0 * p - 1.0);
  if (p < 0.25) return -kSqrt2 * ErfcInvUpper(2.0 * p);
  return kSqrt2 * ErfcInvUpper(2.0 * (1.0 - p));
}

// Scaled complementary error function exp(x^2) erfc(x) (aten.special_erfcx): direct product
// for x < 25, asymptotic series 1/(x sqrt(pi)) sum (-1)^k (2k-1)!!/(2x^2)^k beyond (no
// overflow), 2 exp(x^2) - erfcx(-x) for x < 0 (inf once exp(x^2) overflows).
inline double Erfcx(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  const double ax = std::fabs(x);
  double r;
  if (ax < 25.0) {
    r = std::exp(ax * ax) * std::erfc(ax);
  } else {
    const double h = 0.5 / (ax * ax);
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 20; ++k) {
      term *= -(2 * k - 1) * h;
      sum += term;
      if (std::fabs(term) <= kEps * sum) break;
    }
    r = sum / (ax * kSqrtPi);
  }
  if (x >= 0.0) return r;
  return 2.0 * std::exp(x * x) - r;
}

// log of the standard normal CDF (aten.special_log_ndtr): log(erfcx(-x/sqrt2)/2) - x^2/2 in
// the lower tail (x < -1), log1p(-erfc(x/sqrt2)/2) otherwise. Note: torch's decomposition
// (torch._refs.special.log_ndtr, in the core ATen decomposition table) rewrites this op into
// erfcx/log/erfc/log1p with the split at x < 1; both splits give the same values.
inline double LogNdtr(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  const double t = x / kSqrt2;
  if (x < -1.0) return std::log(0.5 * Erfcx(-t)) - t * t;
  return std::log1p(-0.5 * std::erfc(t));
}

namespace detail {

// sum_k (sign x^2/4)^k / (k! (k+nu)!), nu in {0, 1}: the Bessel J (sign -1) / I (sign +1)
// power series without the (x/2)^nu factor.
inline double BesselPowerSeries(double x, int nu, double sign) {
  const double y = sign * 0.25 * x * x;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 300; ++k) {
    term *= y / (k * static_cast<double>(k + nu));
    sum += term;
    if (std::fabs(term) <= kEps * std::fabs(sum)) break;
  }
  return sum;
}

// e^{-x} I_nu(x) sqrt(2 pi x) for large x > 0: Hankel's asymptotic series, stopped at its
// smallest term (relative error ~ e^{-2x}).
inline double BesselIAsymptotic(double x, int nu) {
  const double mu = 4.0 * nu * nu;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 200; ++k) {
    const double next = term * ((2.0 * k - 1) * (2.0 * k - 1) - mu) / (8.0 * k * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    sum += term;
    if (std::fabs(term) <= kEps * std::fabs(sum)) break;
  }
  return sum;
}

// e^{x} K_nu(x) sqrt(2x/pi) for large x > 0: asymptotic series stopped at its smallest term.
inline double BesselKAsymptotic(double x, int nu) {
  const double mu = 4.0 * nu * nu;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 200; ++k) {
    const double next = term * (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    sum += term;
    if (std::fabs(term) <= kEps * std::fabs(sum)) break;
  }
  return sum;
}

// Hankel's expansion J_nu / Y_nu = sqrt(2/(pi x)) (P cos w -+ Q sin w), w = x - (nu/2+1/4) pi,
// for large x > 0; the phase is formed from sin(x), cos(x) so huge x loses no accuracy.
inline void BesselJYAsymptotic(double x, int nu, double* j, double* y) {
  const double mu = 4.0 * nu * nu;
  double p = 1.0, q = 0.0, term = 1.0;
  for (int k = 1; k < 200; ++k) {
    const double next = term * (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (8.0 * k * x);
    if (std::fabs(next) >= std::fabs(term)) break;
    term = next;
    // u_k enters P (k even) or Q (k odd) with sign (-1)^floor(k/2).
    const double signed_term = ((k / 2) % 2 == 0) ? term : -term;
    if (k % 2 == 0) {
      p += signed_term;
    } else {
      q += signed_term;
    }
    if (std::fabs(term) <= kEps) break;
  }
  const double s = std::sin(x), c = std::cos(x);
  double cw, sw;  // cos(w), sin(w) times sqrt(2)
  if (nu == 0) {
    cw = c + s;
    sw = s - c;
  } else {
    cw = s - c;
    sw = -(s + c);
  }
  const double amp = std::sqrt(1.0 / (kPi * x));  // sqrt(2/(pi x)) / sqrt(2)
  *j = amp * (p * cw - q * sw);
  *y = amp * (p * sw + q * cw);
}

inline constexpr double kJYSeriesLimit = 12.0;
inline constexpr double kISeriesLimit = 15.0;
inline constexpr double kKSeriesLimit = 9.5;

// I_nu(|x|) by the power series (|x| <= kISeriesLimit), nu in {0,1}, unscaled.
inline double BesselISeries(double ax, int nu) {
  const double s = BesselPowerSeries(ax, nu, 1.0);
  return nu == 0 ? s : 0.5 * ax * s;
}

}  // namespace detail

// Modified Bessel I0 (aten.i0): power series sum (x^2/4)^k/(k!)^2 for |x| <= 15, Hankel
// asymptotic series times e^|x| beyond. ATen returns NaN at +-inf.
inline double I0(double x) {
  using namespace detail;
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  const double ax = std::fabs(x);
  if (ax <= kISeriesLimit) return BesselISeries(ax, 0);
  return std::exp(ax) * BesselIAsymptotic(ax, 0) / std::sqrt(2.0 * kPi * ax);
}

// Exponentially scaled I0, e^{-|x|} I0(x) (aten.special_i0e): scaled series or the
// asymptotic series without the exponential (finite for huge x); 0 at +-inf.
inline double I0e(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0.0;
  const double ax = std::fabs(x);
  if (ax <= kISeriesLimit) return std::exp(-ax) * BesselISeries(ax, 0);
  return BesselIAsymptotic(ax, 0) / std::sqrt(2.0 * kPi * ax);
}

// Modified Bessel I1 (aten.special_i1): odd; (x/2) sum (x^2/4)^k/(k!(k+1)!) for |x| <= 15,
// Hankel asymptotic series beyond. ATen returns NaN at +-inf.
inline double I1(double x) {
  using namespace detail;
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  const double ax = std::fabs(x);
  double r;
  if (ax <= kISeriesLimit) {
    r = BesselISeries(ax, 1);
  } else {
    r = std::exp(ax) * BesselIAsymptotic(ax, 1) / std::sqrt(2.0 * kPi * ax);
  }
  return std::copysign(r, x);
}

// Exponentially scaled I1, e^{-|x|} I1(x) (aten.special_i1e): as I1 without the exponential;
// +-0 at +-inf.
inline double I1e(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return std::copysign(0.0, x);
  const double ax = std::fabs(x);
  double r;
  if (ax <= kISeriesLimit) {
    r = std::exp(-ax) * BesselISeries(ax, 1);
  } else {
    r = BesselIAsymptotic(ax, 1) / std::sqrt(2.0 * kPi * ax);
  }
  return std::copysign(r, x);
}

// Modified Bessel I0 (aten.special_modified_bessel_i0): same function and edge values as I0.
inline double ModifiedBesselI0(double x) { return I0(x); }

// Modified Bessel I1 (aten.special_modified_bessel_i1): same function and edge values as I1.
inline double ModifiedBesselI1(double x) { return I1(x); }

// Bessel J0 (aten.special_bessel_j0): even; power series for |x| <= 12, Hankel's
// asymptotic expansion beyond. NaN at +-inf (as ATen).
inline double BesselJ0(double x) {
  using namespace detail;
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  const double ax = std::fabs(x);
  if (ax <= kJYSeriesLimit) return BesselPowerSeries(ax, 0, -1.0);
  double j, y;
  BesselJYAsymptotic(ax, 0, &j, &y);
  return j;
}

// Bessel J1 (aten.special_bessel_j1): odd; (x/2) times the power series for |x| <= 12,
// Hankel's asymptotic expansion beyond. NaN at +-inf (as ATen).
inline double BesselJ1(double x) {
  using namespace detail;
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  const double ax = std::fabs(x);
  double r;
  if (ax <= kJYSeriesLimit) {
    r = 0.5 * ax * BesselPowerSeries(ax, 1, -1.0);
  } else {
    double y;
    BesselJYAsymptotic(ax, 1, &r, &y);
  }
  return x < 0.0 ? -r : r;
}

// Bessel Y0 (aten.special_bessel_y0): (2/pi)[(ln(x/2)+gamma) J0 + sum (-1)^{k+1} H_k
// (x^2/4)^k/(k!)^2] for x <= 12, Hankel's expansion beyond. -inf at +-0, NaN for x < 0
// and at +inf (as ATen).
inline double BesselY0(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  if (x == 0.0) return -kInf;
  if (x < 0.0 || std::isinf(x)) return kNaN;
  if (x > kJYSeriesLimit) {
    double j, y;
    BesselJYAsymptotic(x, 0, &j, &y);
    return y;
  }
  const double q = -0.25 * x * x;
  double term = 1.0, j0 = 1.0, h = 0.0, s = 0.0;
  for (int k = 1; k < 300; ++k) {
    term *= q / (static_cast<double>(k) * k);
    h += 1.0 / k;
    j0 += term;
    s -= term * h;
    if (std::fabs(term) * h <= kEps * std::fmax(std::fabs(s), 1e-300)) break;
  }
  return (2.0 / kPi) * ((std::log(0.5 * x) + kEulerGamma) * j0 + s);
}

// Bessel Y1 (aten.special_bessel_y1): -2/(pi x) + (2/pi) ln(x/2) J1 - (x/(2pi)) sum
// (psi(k+1)+psi(k+2)) (-x^2/4)^k/(k!(k+1)!) for x <= 12, Hankel's expansion beyond.
// -inf at +-0, NaN for x < 0 and at +inf (as ATen).
inline double BesselY1(double x) {
  using namespace detail;
  if (std::isnan(x)) return x;
  if (x == 0.0) return -kInf;
  if (x < 0.0 || std::isinf(x)) return kNaN;
  if (x > kJYSeriesLimit) {
    double j, y;
    BesselJYAsymptotic(x, 1, &j, &y);
    return y;
  }
  const double q = -0.25 * x * x;
  double term = 1.0, j1 = 1.0, hk = 0.0, hk1 = 1.0;
  double s = -2.0 * kEulerGamma + 1.0;  // k = 0: psi(1) + psi(2)
  for (int k = 1; k < 300; ++k) {
    term *= q / (static_cast<double>(k) * (k + 1));
    hk += 1.0 / k;
    hk1 += 1.0 / (k + 1);
    j1 += term;
    const double t = term * (hk + hk1 - 2.0 * kEulerGamma);
    s += t;
    if (std::fabs(t) <= kEps * std::fabs(s) && std::fabs(term) <= kEps * std::fabs(j1)) break;
  }
  j1 *= 0.5 * x;
  return -2.0 / (kPi * x) + (2.0 / kPi) * std::log(0.5 * x) * j1 - x / (2.0 * kPi) * s;
}

namespace detail {

// K0 and K1 for 0 < x <= kKSeriesLimit from their logarithmic power series
// (DLMF 10.31.1-2), unscaled.
inline double BesselK0Series(double x) {
  const double q = 0.25 * x * x;
  double term = 1.0, i0 = 1.0, h = 0.0, s = 0.0;
  for (int k = 1; k < 300; ++k) {
    term *= q / (static_cast<double>(k) * k);
    h += 1.0 / k;
    i0 += term;
    s += term * h;
    if (term * h <= kEps * s) break;
  }
  return -(std::log(0.5 * x) + kEulerGamma) * i0 + s;
}

inline double BesselK1Series(double x) {
  const double q = 0.25 * x * x;
  double term = 1.0, i1 = 1.0, hk = 0.0, hk1 = 1.0;
  double s = -2.0 * kEulerGamma + 1.0;  // k = 0: psi(1) + psi(2)
  for (int k = 1; k < 300; ++k) {
    term *= q / (static_cast<double>(k) * (k + 1));
    hk += 1.0 / k;
    hk1 += 1.0 / (k + 1);
    i1 += term;
    const double t = term * (hk + hk1 - 2.0 * kEulerGamma);
    s += t;
    if (std::fabs(t) <= kEps * std::fabs(s) && term <= kEps * i1) break;
  }
  i1 *= 0.5 * x;
  return 1.0 / x + std::log(0.5 * x) * i1 - 0.25 * x * s;
}

}  // namespace detail

namespace detail {

// K_order(x), times e^x when `scaled`: the logarithmic power series for
// x <= 9.5, the asymptotic series beyond (without the exponential when
// scaled, so huge x stays finite). inf at +-0, NaN for x < 0, 0 at +inf
// (as ATen).
inline double ModifiedBesselK(double x, int order, bool scaled) {
  if (std::isnan(x)) return x;
  if (x == 0.0) return kInf;
  if (x < 0.0) return kNaN;
  if (std::isinf(x)) return 0.0;
  if (x <= kKSeriesLimit) {
    const double k = order == 0 ? BesselK0Series(x) : BesselK1Series(x);
    return scaled ? std::exp(x) * k : k;
  }
  const double a = std::sqrt(kPi / (2.0 * x)) * BesselKAsymptotic(x, order);
  return scaled ? a : std::exp(-x) * a;
}

}  // namespace detail

// Modified Bessel K0 and K1 (aten.special_modified_bessel_k0/k1).
inline double ModifiedBesselK0(double x) { return detail::ModifiedBesselK(x, 0, false); }
inline double ModifiedBesselK1(double x) { return detail::ModifiedBesselK(x, 1, false); }
// e^x K0(x) and e^x K1(x) (aten.special_scaled_modified_bessel_k0/k1).
inline double ScaledModifiedBesselK0(double x) { return detail::ModifiedBesselK(x, 0, true); }
inline double ScaledModifiedBesselK1(double x) { return detail::ModifiedBesselK(x, 1, true); }

// Spherical Bessel j0(x) = sin(x)/x (aten.special_spherical_bessel_j0): 1 at 0, 0 at +-inf.
inline double SphericalBesselJ0(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return 0.0;
  if (x == 0.0) return 1.0;
  return std::sin(x) / x;
}

// Airy Ai(x) (aten.special_airy_ai): Maclaurin series Ai(0) f(x) + Ai'(0) g(x) for
// -7 <= x <= 5.8, the asymptotic expansions in zeta = (2/3)|x|^{3/2} (DLMF 9.7.5, 9.7.9)
// outside. NaN at +-inf (as ATen).
inline double AiryAi(double x) {
  using namespace detail;
  if (std::isnan(x) || std::isinf(x)) return kNaN;
  if (x >= -7.0 && x <= 5.8) {
    const double x3 = x * x * x;
    double f = 1.0, g = x, tf = 1.0, tg = x;
    for (int k = 1; k < 200; ++k) {
      tf *= x3 / ((3.0 * k - 1) * (3.0 * k));
      tg *= x3 / ((3.0 * k) * (3.0 * k + 1));
      f += tf;
      g += tg;
      if (std::fabs(tf) + std::fabs(tg) <= kEps * (std::fabs(f) + std::fabs(g))) break;
    }
    return kAi0 * f - kMinusAip0 * g;
  }
  const double ax = std::fabs(x);
  // zeta = (2/3) ax^{3/2} as a double-double zeta + zeta_lo (via fma), so the oscillation
  // phase for large negative x stays exact far beyond where a plain double product would.
  const double sq = std::sqrt(ax);
  const double sq_lo = std::fma(-sq, sq, ax) / (2.0 * sq);
  const double p_hi = ax * sq;
  const double p_lo = std::fma(ax, sq, -p_hi) + ax * sq_lo;
  constexpr double kTwoThirdsLo = 3.700743415417188e-17;  // 2/3 - double(2/3)
  const double z_hi = p_hi * (2.0 / 3.0);
  const double z_lo = std::fma(p_hi, 2.0 / 3.0, -z_hi) + p_hi * kTwoThirdsLo + p_lo * (2.0 / 3.0);
  const double zeta = z_hi + z_lo;
  const double zeta_lo = z_lo - (zeta - z_hi);
  // u_k = (2k+1)(2k+3)...(6k-1) / (216^k k!), applied as u_k / zeta^k.
  auto next_u = [zeta](double u, int k) {
    return u * ((6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1)) / ((2.0 * k - 1) * 216.0 * k * zeta);
  };
  if (x > 0.0) {
    double term = 1.0, sum = 1.0;
    for (int k = 1; k < 100; ++k) {
      const double t = -next_u(term, k);  // (-1)^k u_k / zeta^k
      if (std::fabs(t) >= std::fabs(term)) break;
      term = t;
      sum += term;
      if (std::fabs(term) <= kEps * sum) break;
    }
    return std::exp(-zeta) * sum / (2.0 * kSqrtPi * std::sqrt(std::sqrt(ax)));
  }
  // x < 0: Ai(-z) = [cos(zeta - pi/4) P + sin(zeta - pi/4) Q] / (sqrt(pi) z^{1/4}),
  // P = sum (-1)^k u_2k / zeta^2k, Q = sum (-1)^k u_{2k+1} / zeta^{2k+1}.
  double p = 1.0, q = 0.0, u = 1.0;
  for (int k = 1; k < 100; ++k) {
    const double next = next_u(u, k);
    if (std::fabs(next) >= std::fabs(u)) break;
    u = next;
    const double signed_u = ((k / 2) % 2 == 0) ? u : -u;
    if (k % 2 == 0) {
      p += signed_u;
    } else {
      q += signed_u;
    }
    if (u <= kEps) break;
  }
  const double s0 = std::sin(zeta), c0 = std::cos(zeta);
  const double sl = std::sin(zeta_lo), cl = std::cos(zeta_lo);
  const double s = s0 * cl + c0 * sl, c = c0 * cl - s0 * sl;
  // cos(zeta - pi/4) = (c + s)/sqrt2, sin(zeta - pi/4) = (s - c)/sqrt2
  return ((c + s) * p + (s - c) * q) / (kSqrt2 * kSqrtPi * std::sqrt(std::sqrt(ax)));
}

namespace detail {

// P(a, x) by its power series x^a e^{-x}/Gamma(a+1) sum_k x^k/((a+1)...(a+k)); x < a + 1.
inline double IncGammaSeriesP(double a, double x) {
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 2000; ++k) {
    term *= x / (a + k);
    sum += term;
    if (term <= kEps * sum) break;
  }
  return std::exp(a * std::log(x) - x - LogGamma1p(a)) * sum;
}

// Q(a, x) for small a (< 0.3) and x < a + 1, without cancellation as a -> 0:
// Q = -expm1(u) - e^u a sum_{k>=1} (-x)^k/(k!(a+k)), u = a ln x - ln Gamma(1+a).
inline double IncGammaSmallAQ(double a, double x) {
  double term = 1.0, sum = 0.0;
  for (int k = 1; k < 500; ++k) {
    term *= -x / k;
    const double t = term / (a + k);
    sum += t;
    if (std::fabs(t) <= kEps * std::fabs(sum)) break;
  }
  const double u = a * std::log(x) - LogGamma1pSmall(a);
  return -std::expm1(u) - std::exp(u) * a * sum;
}

// Q(a, x) for x >= a + 1 by Legendre's continued fraction (modified Lentz).
inline double IncGammaContinuedFractionQ(double a, double x) {
  constexpr double tiny = 1e-300;
  const double b0 = x + 1.0 - a;
  double f = b0 == 0.0 ? tiny : b0;
  double c = f, d = 0.0;
  for (int k = 1; k < 2000; ++k) {
    const double an = -k * (k - a);
    const double bn = b0 + 2.0 * k;
    d = bn + an * d;
    if (std::fabs(d) < tiny) d = tiny;
    c = bn + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = c * d;
    f *= delta;
    if (std::fabs(delta - 1.0) <= 1e-16) break;
  }
  const double log_gamma_a = LogGamma1p(a) - std::log(a);
  return std::exp(a * std::log(x) - x - log_gamma_a) / f;
}

// Temme's uniform asymptotic expansion (DLMF 8.12.3-8.12.8) with c0, c1, for a >= 100;
// erfc is applied as e^{-z^2} erfcx(z) so deep tails keep relative accuracy.
inline double IncGammaTemme(double a, double x, bool upper) {
  const double mu = (x - a) / a;
  double half_eta2;  // lambda - 1 - ln(lambda)
  if (std::fabs(mu) < 0.1) {
    double s = 0.0, p = 1.0;
    for (int k = 0; k < 18; ++k) {
      s += p / (k + 2);
      p *= -mu;
    }
    half_eta2 = mu * mu * s;
  } else if (mu < 0.5) {
    half_eta2 = mu - std::log1p(mu);
  } else {
    const double lam = x / a;
    half_eta2 = lam - 1.0 - std::log(lam);
  }
  const double eta = std::copysign(std::sqrt(2.0 * half_eta2), mu);
  double c0, c1;
  if (std::fabs(mu) < 0.1) {
    c0 = Poly(kTemmeC0, mu);
    c1 = Poly(kTemmeC1, mu);
  } else {
    c0 = 1.0 / mu - 1.0 / eta;
    c1 = 1.0 / (eta * eta * eta) - 1.0 / (mu * mu * mu) - 1.0 / (mu * mu) - 1.0 / (12.0 * mu);
  }
  const double r = (c0 + c1 / a) / std::sqrt(2.0 * kPi * a);
  const double z = eta * std::sqrt(0.5 * a);
  const double scale = std::exp(-a * half_eta2);
  if (mu >= 0.0) {
    const double q = scale * (0.5 * Erfcx(z) + r);
    return upper ? q : 1.0 - q;
  }
  const double p = scale * (0.5 * Erfcx(-z) - r);
  return upper ? 1.0 - p : p;
}

// Regularized P(a, x) (upper = false) or Q(a, x) (upper = true) for finite a, x > 0.
inline double IncGamma(double a, double x, bool upper) {
  if (a >= 100.0) return IncGammaTemme(a, x, upper);
  if (x < a + 1.0) {
    if (upper && a < 0.3) return IncGammaSmallAQ(a, x);
    const double p = IncGammaSeriesP(a, x);
    return upper ? 1.0 - p : p;
  }
  const double q = IncGammaContinuedFractionQ(a, x);
  return upper ? q : 1.0 - q;
}

}  // namespace detail

// Regularized lower incomplete gamma P(a, x) (aten.igamma): power series for x < a+1,
// continued fraction for Q otherwise, Temme's uniform expansion for a >= 100. Edge
// values in ATen's order: NaN if x < 0 or a < 0; a == 0 -> 1 (x > 0) else NaN; x == 0 -> 0;
// a == inf -> NaN if x == inf else 0; x == inf -> 1.
inline double Igamma(double a, double x) {
  using namespace detail;
  if (x < 0.0 || a < 0.0) return kNaN;
  if (a == 0.0) return x > 0.0 ? 1.0 : kNaN;
  if (x == 0.0) return 0.0;
  if (std::isinf(a)) return std::isinf(x) ? kNaN : 0.0;
  if (std::isinf(x)) return 1.0;
  if (std::isnan(a) || std::isnan(x)) return kNaN;
  return IncGamma(a, x, false);
}

// Regularized upper incomplete gamma Q(a, x) (aten.igammac): as Igamma, computing Q
// directly where it is small; edge values mirror Igamma's (a == 0 -> 0, x == 0 -> 1, ...).
inline double Igammac(double a, double x) {
  using namespace detail;
  if (x < 0.0 || a < 0.0) return kNaN;
  if (a == 0.0) return x > 0.0 ? 0.0 : kNaN;
  if (x == 0.0) return 1.0;
  if (std::isinf(a)) return std::isinf(x) ? kNaN : 1.0;
  if (std::isinf(x)) return 0.0;
  if (std::isnan(a) || std::isnan(x)) return kNaN;
  return IncGamma(a, x, true);
}

namespace detail {

// ATen converts the floating-point degree with static_cast<int64_t>: truncation toward
// zero; NaN, +-inf and |n| >= 2^63 become INT64_MIN on x86, i.e. a negative degree (-> 0).
inline int64_t PolynomialDegree(double n) {
  constexpr double kTwo63 = 9223372036854775808.0;
  if (!(n > -kTwo63 && n < kTwo63)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(n);
}

enum class ChebyshevKind { kT, kU, kV, kW };

// Chebyshev polynomial of the given kind at integer degree n >= 0: three-term recurrence
// for n <= 32 and |x| < 1; trigonometric (|x| < 1) or hyperbolic (|x| > 1) closed forms
// otherwise (O(1) in n and free of inf - inf). Values at x = +-1 are exact; infinite x
// follows ATen's recurrence (degree <= 2 infinite, NaN above).
inline double Chebyshev(ChebyshevKind kind, double x, int64_t n) {
  if (n < 0) return 0.0;
  if (n == 0) return 1.0;
  if (std::isnan(x)) return x;
  const double nd = static_cast<double>(n);
  const bool odd = (n & 1) != 0;
  double first;  // degree-1 polynomial
  switch (kind) {
    case ChebyshevKind::kT: first = x; break;
    case ChebyshevKind::kU: first = 2.0 * x; break;
    case ChebyshevKind::kV: first = 2.0 * x - 1.0; break;
    default: first = 2.0 * x + 1.0; break;
  }
  if (n == 1) return first;
  if (std::isinf(x)) return n == 2 ? kInf : kNaN;
  if (x == 1.0 || x == -1.0) {
    const double sign = (x < 0.0 && odd) ? -1.0 : 1.0;
    switch (kind) {
      case ChebyshevKind::kT: return sign;
      case ChebyshevKind::kU: return sign * (nd + 1.0);
      case ChebyshevKind::kV: return x > 0.0 ? 1.0 : sign * (2.0 * nd + 1.0);
      default: return x > 0.0 ? 2.0 * nd + 1.0 : sign;
    }
  }
  const double ax = std::fabs(x);
  if (ax < 1.0 && n <= 32) {
    double p = 1.0, q = first;
    for (int64_t k = 2; k <= n; ++k) {
      const double r = 2.0 * x * q - p;
      p = q;
      q = r;
    }
    return q;
  }
  // Reflection to y = |x|: T, U pick up (-1)^n; V and W swap.
  ChebyshevKind k2 = kind;
  if (x < 0.0) {
    if (kind == ChebyshevKind::kV) k2 = ChebyshevKind::kW;
    if (kind == ChebyshevKind::kW) k2 = ChebyshevKind::kV;
  }
  const double sign = (x < 0.0 && odd) ? -1.0 : 1.0;
  double v;
  if (ax < 1.0) {
    const double th = std::acos(ax);
    switch (k2) {
      case ChebyshevKind::kT: v = std::cos(nd * th); break;
      case ChebyshevKind::kU: v = std::sin((nd + 1.0) * th) / std::sin(th); break;
      case ChebyshevKind::kV: v = std::cos((nd + 0.5) * th) / std::cos(0.5 * th); break;
      default: v = std::sin((nd + 0.5) * th) / std::sin(0.5 * th); break;
    }
  } else {
    const double t = std::acosh(ax);
    const double e = std::exp(nd * t);
    switch (k2) {
      case ChebyshevKind::kT: v = std::cosh(nd * t); break;
      case ChebyshevKind::kU: v = e * (std::expm1(-2.0 * (nd + 1.0) * t) / std::expm1(-2.0 * t)); break;
      case ChebyshevKind::kV: v = e * ((1.0 + std::exp(-(2.0 * nd + 1.0) * t)) / (1.0 + std::exp(-t))); break;
      default: v = e * (std::expm1(-(2.0 * nd + 1.0) * t) / std::expm1(-t)); break;
    }
  }
  return sign * v;
}

// Sign of the leading term of a polynomial of degree n with positive leading coefficient,
// used when a recurrence overflows (only happens where the leading term dominates).
inline double OverflowValue(double x, int64_t n) {
  return (x < 0.0 && (n & 1)) ? -kInf : kInf;
}

}  // namespace detail

// Chebyshev T_n(x) (aten.special_chebyshev_polynomial_t): see detail::Chebyshev.
inline double ChebyshevT(double x, double n) {
  return detail::Chebyshev(detail::ChebyshevKind::kT, x, detail::PolynomialDegree(n));
}

// Chebyshev U_n(x) (aten.special_chebyshev_polynomial_u): see detail::Chebyshev.
inline double ChebyshevU(double x, double n) {
  return detail::Chebyshev(detail::ChebyshevKind::kU, x, detail::PolynomialDegree(n));
}

// Chebyshev V_n(x) (aten.special_chebyshev_polynomial_v): see detail::Chebyshev.
inline double ChebyshevV(double x, double n) {
  return detail::Chebyshev(detail::ChebyshevKind::kV, x, detail::PolynomialDegree(n));
}

// Chebyshev W_n(x) (aten.special_chebyshev_polynomial_w): see detail::Chebyshev.
inline double ChebyshevW(double x, double n) {
  return detail::Chebyshev(detail::ChebyshevKind::kW, x, detail::PolynomialDegree(n));
}

// Shifted Chebyshev T*_n(x) = T_n(2x - 1) (aten.special_shifted_chebyshev_polynomial_t).
inline double ShiftedChebyshevT(double x, double n) { return ChebyshevT(2.0 * x - 1.0, n); }

// Shifted Chebyshev U*_n(x) = U_n(2x - 1) (aten.special_shifted_chebyshev_polynomial_u).
inline double ShiftedChebyshevU(double x, double n) { return ChebyshevU(2.0 * x - 1.0, n); }

// Shifted Chebyshev V*_n(x) = V_n(2x - 1) (aten.special_shifted_chebyshev_polynomial_v).
inline double ShiftedChebyshevV(double x, double n) { return ChebyshevV(2.0 * x - 1.0, n); }

// Shifted Chebyshev W*_n(x) = W_n(2x - 1) (aten.special_shifted_chebyshev_polynomial_w).
inline double ShiftedChebyshevW(double x, double n) { return ChebyshevW(2.0 * x - 1.0, n); }

// Physicists' Hermite H_n(x) (aten.special_hermite_polynomial_h): recurrence
// H_{k+1} = 2x H_k - 2k H_{k-1}; ATen's float kernel returns NaN for n > 128.
inline double HermiteH(double x, double n_in) {
  using namespace detail;
  const int64_t n = PolynomialDegree(n_in);
  if (n < 0) return 0.0;
  if (n == 0) return 1.0;
  if (n == 1) return 2.0 * x;
  if (n > 128 || std::isnan(x)) return kNaN;
  if (std::isinf(x)) return n == 2 ? kInf : kNaN;
  double p = 1.0, q = 2.0 * x;
  for (int64_t k = 1; k < n; ++k) {
    const double r = 2.0 * x * q - 2.0 * static_cast<double>(k) * p;
    p = q;
    q = r;
    if (!std::isfinite(q)) return OverflowValue(x, n);
  }
  return q;
}

// Probabilists' Hermite He_n(x) (aten.special_hermite_polynomial_he): recurrence
// He_{k+1} = x He_k - k He_{k-1}; ATen's float kernel returns NaN for n > 128.
inline double HermiteHe(double x, double n_in) {
  using namespace detail;
  const int64_t n = PolynomialDegree(n_in);
  if (n < 0) return 0.0;
  if (n == 0) return 1.0;
  if (n == 1) return x;
  if (n > 128 || std::isnan(x)) return kNaN;
  if (std::isinf(x)) return n == 2 ? kInf : kNaN;
  double p = 1.0, q = x;
  for (int64_t k = 1; k < n; ++k) {
    const double r = x * q - static_cast<double>(k) * p;
    p = q;
    q = r;
    if (!std::isfinite(q)) return OverflowValue(x, n);
  }
  return q;
}

// Laguerre L_n(x) (aten.special_laguerre_polynomial_l): recurrence
// (k+1) L_{k+1} = (2k+1-x) L_k - k L_{k-1} up to n = 2^20; beyond (where ATen would loop
// n times) the leading Bessel approximation e^{x/2} J0(2 sqrt((n+1/2) x)) (I0 for x < 0).
// L_n(0) = 1 as ATen.
inline double LaguerreL(double x, double n_in) {
  using namespace detail;
  const int64_t n = PolynomialDegree(n_in);
  if (n < 0) return 0.0;
  if (x == 0.0 || n == 0) return 1.0;
  if (std::isnan(x)) return x;
  if (n == 1) return 1.0 - x;
  if (std::isinf(x)) return n == 2 ? kInf : kNaN;
  const double overflow = (x > 0.0 && (n & 1)) ? -kInf : kInf;
  if (n <= (int64_t{1} << 20)) {
    double p = 1.0, q = 1.0 - x;
    for (int64_t k = 1; k < n; ++k) {
      const double kd = static_cast<double>(k);
      const double r = ((2.0 * kd + 1.0 - x) * q - kd * p) / (kd + 1.0);
      p = q;
      q = r;
      if (!std::isfinite(q)) return overflow;
    }
    return q;
  }
  const double nu = static_cast<double>(n) + 0.5;
  if (x < 0.0) {
    const double arg = 2.0 * std::sqrt(-nu * x);
    return std::exp(0.5 * x + arg) * I0e(arg);  // no 0 * inf when e^{x/2} underflows
  }
  if (x >= 4.0 * nu) return overflow;  // past the turning point |L_n| ~ x^n/n! overflows
  return std::exp(0.5 * x) * BesselJ0(2.0 * std::sqrt(nu * x));
}

// Legendre P_n(x) (aten.special_legendre_polynomial_p): recurrence
// (k+1) P_{k+1} = (2k+1) x P_k - k P_{k-1} for n <= 2^16, Hilb's formula
// sqrt(t/sin t) J0((n+1/2) t), x = cos t (I0 / sinh for |x| > 1) beyond (error O(n^-3/2),
// ~1e-9 there) where ATen would loop n times.
inline double LegendreP(double x, double n_in) {
  using namespace detail;
  const int64_t n = PolynomialDegree(n_in);
  if (n < 0) return 0.0;
  const bool odd = (n & 1) != 0;
  if (x == 1.0 || x == -1.0) return (x < 0.0 && odd) ? -1.0 : 1.0;
  if (n == 0) return 1.0;
  if (std::isnan(x)) return x;
  if (n == 1) return x;
  if (std::isinf(x)) return n == 2 ? kInf : kNaN;
  if (n <= (int64_t{1} << 16)) {
    double p = 1.0, q = x;
    for (int64_t k = 1; k < n; ++k) {
      const double kd = static_cast<double>(k);
      const double r = ((2.0 * kd + 1.0) * x * q - kd * p) / (kd + 1.0);
      p = q;
      q = r;
      if (!std::isfinite(q)) return OverflowValue(x, n);
    }
    return q;
  }
  const double ax = std::fabs(x);
  const double m = static_cast<double>(n) + 0.5;
  double v;
  if (ax < 1.0) {
    const double t = std::acos(ax);
    v = std::sqrt(t / std::sin(t)) * BesselJ0(m * t);
  } else {
    const double t = std::acosh(ax);
    v = std::sqrt(t / std::sinh(t)) * I0(m * t);
  }
  return (x < 0.0 && odd) ? -v : v;
}

}  // namespace kiln::runtime::special
