// Vectorized f32 transcendental functions (AVX2 + FMA, 8 lanes) for the
// elementwise kernels: exp, sigmoid, tanh, erf, gelu (erf and tanh forms)
// and silu.
//
// Accuracy, against the exact result over the whole float range (every 13th
// float checked): where the result is a normal float, exp within 1.4 ulp,
// sigmoid, tanh, erf and silu within 4 ulp, gelu within 7 ulp (4.2e-7
// relative; tests/runtime/kernels/vector_math_test.cc holds them to 2e-6);
// subnormal results within 3 subnormal steps. Special values: NaN in gives NaN out; exp(-inf) = 0,
// exp(+inf) = +inf; sigmoid, tanh and erf saturate to their limits
// (sigmoid(-inf) = 0, tanh(-inf) = erf(-inf) = -1); -0 stays -0 wherever the
// function is odd. gelu and silu at -inf give NaN, as ATen's formulas do
// (-inf * 0), and +inf at +inf.
//
// Every function is written once, for a vector. Scalar callers and the
// tails of arrays go through the same vector code (a broadcast, or a masked
// load), so a value's result never depends on where it sits in a tensor.
//
// The formulas avoid the cancellations of the textbook forms: gelu's
// negative tail uses erfc (computed as exp(-z^2) times a polynomial, with
// z^2 split into two floats) rather than 1 + erf, and gelu_tanh uses
// x * sigmoid(2u) with 2u carried in two floats, since for x around -10 the
// result is exp(-88)-small and an ulp of error in u becomes 1e-5 in it.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__)
#error "vector_math.h needs AVX2 and FMA (build with -march=x86-64-v3)"
#endif

#include <immintrin.h>

#include <cstdint>

namespace kiln::runtime::vmath {

#define KILN_VMATH_INLINE inline __attribute__((always_inline))

// ---- Small helpers ---------------------------------------------------------

KILN_VMATH_INLINE __m256 Set(float c) { return _mm256_set1_ps(c); }

KILN_VMATH_INLINE __m256 Abs(__m256 x) {
  return _mm256_andnot_ps(Set(-0.0f), x);
}

// |magnitude| with the sign bit of `sign`.
KILN_VMATH_INLINE __m256 CopySign(__m256 magnitude, __m256 sign) {
  return _mm256_or_ps(Abs(magnitude), _mm256_and_ps(sign, Set(-0.0f)));
}

// `result` where x is a number, x (a NaN) where it is not: the formulas
// below clamp their inputs, and min/max would turn a NaN into the bound.
KILN_VMATH_INLINE __m256 KeepNaN(__m256 result, __m256 x) {
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Lanes [0, n) set, for masked loads and stores of an array's last n < 8
// elements.
KILN_VMATH_INLINE __m256i TailMask(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

KILN_VMATH_INLINE float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest lane; callers accumulate with _mm256_max_ps(x, acc), which
// skips NaN x the way `m = std::max(m, x)` does, so no lane is NaN here.
KILN_VMATH_INLINE float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// ---- exp -------------------------------------------------------------------

// e^x = e^r * 2^n with x = n ln2 + r, |r| <= ln2/2 (ln2 in two parts, so
// r is exact to float precision), e^r by a degree-7 polynomial (Cephes'
// expf coefficients). Returns e^r and sets *n; x must be clamped so that
// n fits the caller's scaling.
KILN_VMATH_INLINE __m256 ExpReduced(__m256 xc, __m256* n_out) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, Set(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, Set(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, Set(-2.12194440e-4f), r);
  __m256 p = Set(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, Set(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, Set(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, Set(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, Set(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, Set(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  *n_out = n;
  return _mm256_add_ps(p, Set(1.0f));
}

// e^x * 2^k for a constant k in [0, 64] (k > 0 only for x <= 0): e^r of
// ExpReduced times 2^{n+k} applied as two factors, so that results near
// the overflow threshold and in the subnormal range come out right.
//
// The 2^k lets the tails of sigmoid-like functions keep full precision
// where e^x alone would be subnormal: they work with e^x 2^64 and scale the
// final result down once.
KILN_VMATH_INLINE __m256 ExpScaled(__m256 x, int k) {
  // Beyond these the result is +inf or exactly 0 (the lower bound itself
  // rounds to 0, which the -inf * 0 = NaN of silu and gelu relies on); the
  // clamp keeps n in range.
  const float lo = -104.0f - 0.69314718f * static_cast<float>(k);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, Set(lo)), Set(89.0f));
  __m256 n;
  const __m256 p = ExpReduced(xc, &n);
  // n + k in [-150, 128]: each half in [-75, 64] is a normal power of two.
  const __m256i ni = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(k));
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return KeepNaN(_mm256_mul_ps(_mm256_mul_ps(p, s1), s2), x);
}

KILN_VMATH_INLINE __m256 Exp(__m256 x) { return ExpScaled(x, 0); }

// e^x for softmax's shifted scores (x - max, or scale * x - scale * max by
// one FMA): x <= 0 but for a rounding step, so the result lies in (0, 1].
// Exp's reduction and polynomial without its range handling, which costs a
// third of Exp's instructions and which such inputs never need: 2^n is
// added to the polynomial's exponent bits directly. Below -80 the result is
// 0 (e^-80 is 1.8e-35, beyond a float's resolution of a sum that holds
// e^0 = 1), so e^-inf of a masked score is exactly 0; NaN stays NaN.
// Within 2e-7 relative of e^x on [-80, 88] (tests/runtime/kernels).
KILN_VMATH_INLINE __m256 ExpShifted(__m256 x) {
  const __m256 floor = Set(-80.0f);
  const __m256 keep = _mm256_cmp_ps(x, floor, _CMP_NLT_UQ);  // x >= -80, or NaN
  const __m256 xc = _mm256_max_ps(floor, x);                  // a NaN x passes through
  __m256 n;
  const __m256 p = ExpReduced(xc, &n);
  // x in [-80, 88]: n in [-116, 127] and p * 2^n a normal float, its
  // exponent p's plus n.
  const __m256i scaled = _mm256_add_epi32(_mm256_castps_si256(p),
                                          _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23));
  return _mm256_and_ps(_mm256_castsi256_ps(scaled), keep);
}

// The scale of ExpScaled the tails below use, and its inverse.
inline constexpr int kTailScaleLog2 = 64;
KILN_VMATH_INLINE __m256 InvTailScale() { return Set(0x1p-64f); }

// ---- sigmoid, silu ---------------------------------------------------------

// 1 / (1 + e^-x) as e/(1 + e) or 1/(1 + e) with e = e^-|x| <= 1, so e never
// overflows and the negative tail keeps full relative precision.
KILN_VMATH_INLINE __m256 Sigmoid(__m256 x) {
  const __m256 e = Exp(_mm256_or_ps(x, Set(-0.0f)));  // e^-|x|
  const __m256 nonneg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 num = _mm256_blendv_ps(e, Set(1.0f), nonneg);
  return _mm256_div_ps(num, _mm256_add_ps(Set(1.0f), e));
}

// `x * sigmoid(t)` given es = e^-|t| 2^64 (and a correction factor already
// applied), for the tails of silu and gelu_tanh: x / (1 + e) for t >= 0,
// x e / (1 + e) for t < 0, the latter formed at 2^64 scale and scaled down
// last so that it is rounded once even when subnormal. x = -inf gives NaN
// (-inf * 0), as in ATen.
KILN_VMATH_INLINE __m256 TimesSigmoidTail(__m256 x, __m256 es, __m256 t_nonneg) {
  const __m256 den = _mm256_fmadd_ps(es, InvTailScale(), Set(1.0f));
  const __m256 num = _mm256_blendv_ps(_mm256_mul_ps(x, es), x, t_nonneg);
  const __m256 q = _mm256_div_ps(num, den);
  return _mm256_blendv_ps(_mm256_mul_ps(q, InvTailScale()), q, t_nonneg);
}

// x * sigmoid(x).
KILN_VMATH_INLINE __m256 Silu(__m256 x) {
  const __m256 es = ExpScaled(_mm256_or_ps(x, Set(-0.0f)), kTailScaleLog2);
  const __m256 nonneg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  return KeepNaN(TimesSigmoidTail(x, es, nonneg), x);
}

// ---- tanh ------------------------------------------------------------------

// |x| < 0.625: |x| + |x|^3 P(x^2) (a minimax fit); above,
// 1 - 2 / (e^{2|x|} + 1), which loses at most a few ulp there. Computed on
// |x| and given x's sign bit last, so tanh(-0) = -0.
KILN_VMATH_INLINE __m256 Tanh(__m256 x) {
  const __m256 a = Abs(x);
  const __m256 s = _mm256_mul_ps(x, x);
  __m256 p = Set(-0.006096863283783189f);
  p = _mm256_fmadd_ps(p, s, Set(0.020997302619837326f));
  p = _mm256_fmadd_ps(p, s, Set(-0.05385094065343059f));
  p = _mm256_fmadd_ps(p, s, Set(0.13332769968700098f));
  p = _mm256_fmadd_ps(p, s, Set(-0.33333328945337887f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), a, a);
  const __m256 e = Exp(_mm256_add_ps(a, a));
  const __m256 large =
      _mm256_sub_ps(Set(1.0f), _mm256_div_ps(Set(2.0f), _mm256_add_ps(e, Set(1.0f))));
  const __m256 mag = _mm256_blendv_ps(large, small, _mm256_cmp_ps(a, Set(0.625f), _CMP_LT_OQ));
  return KeepNaN(_mm256_or_ps(mag, _mm256_and_ps(x, Set(-0.0f))), x);
}

// ---- erf, erfc -------------------------------------------------------------

// erf(z) / z for |z| < 1 (used below 0.5), as a polynomial in z^2 (minimax
// fit, relative error 1.2e-9).
KILN_VMATH_INLINE __m256 ErfOverZSmall(__m256 z2) {
  __m256 p = Set(7.853743160648944e-05f);
  p = _mm256_fmadd_ps(p, z2, Set(-0.0008010161404485689f));
  p = _mm256_fmadd_ps(p, z2, Set(0.005188324421666351f));
  p = _mm256_fmadd_ps(p, z2, Set(-0.026853810428084757f));
  p = _mm256_fmadd_ps(p, z2, Set(0.11283585117597345f));
  p = _mm256_fmadd_ps(p, z2, Set(-0.37612625821945445f));
  return _mm256_fmadd_ps(p, z2, Set(1.1283791657264517f));
}

// erfc(a) 2^64 for a >= 0.5, given a^2 = a2_hi + a2_lo exactly (two
// floats): e^{-a^2} Q(t), t = 1 / (1 + a/2), Q a minimax fit of erfcx
// (relative error 2e-9 on [0.5, 11]). Splitting a^2 matters: an ulp of a^2 = 100 is
// 4e-6 of e^{-a^2}. Past a = 11 (erfc < 1e-53) Q is held at its a = 11
// value; the result there rounds to 0 once scaled down.
KILN_VMATH_INLINE __m256 ErfcLargeScaled(__m256 a, __m256 a2_hi, __m256 a2_lo) {
  const __m256 ac = _mm256_min_ps(a, Set(11.0f));
  const __m256 t = _mm256_div_ps(Set(1.0f), _mm256_fmadd_ps(ac, Set(0.5f), Set(1.0f)));
  __m256 q = Set(-0.07274105644047643f);
  q = _mm256_fmadd_ps(q, t, Set(0.34420467389566617f));
  q = _mm256_fmadd_ps(q, t, Set(-0.598183632495287f));
  q = _mm256_fmadd_ps(q, t, Set(0.3932689323308387f));
  q = _mm256_fmadd_ps(q, t, Set(-0.0997835586412554f));
  q = _mm256_fmadd_ps(q, t, Set(0.23202165174853806f));
  q = _mm256_fmadd_ps(q, t, Set(0.23571186426156576f));
  q = _mm256_fmadd_ps(q, t, Set(0.28349895818317594f));
  q = _mm256_fmadd_ps(q, t, Set(0.2819932995226183f));
  q = _mm256_fmadd_ps(q, t, Set(3.192910035574207e-06f));
  // e^{-(hi + lo)} = e^{-hi} (1 - lo) to first order; |lo| < 1e-5 where
  // the result is not 0. The clamps keep an overflowed a^2 (lo = -inf or
  // NaN) from turning 0 * (1 - lo) into NaN.
  const __m256 hi = _mm256_min_ps(a2_hi, Set(1000.0f));
  const __m256 lo = _mm256_min_ps(_mm256_max_ps(a2_lo, Set(-1.0f)), Set(1.0f));
  const __m256 e = _mm256_mul_ps(ExpScaled(_mm256_sub_ps(_mm256_setzero_ps(), hi), kTailScaleLog2),
                                 _mm256_sub_ps(Set(1.0f), lo));
  return _mm256_mul_ps(e, q);
}

KILN_VMATH_INLINE __m256 Erf(__m256 x) {
  const __m256 a = Abs(x);
  const __m256 hi = _mm256_mul_ps(x, x);
  const __m256 lo = _mm256_fmsub_ps(x, x, hi);
  const __m256 small = _mm256_mul_ps(x, ErfOverZSmall(hi));
  const __m256 erfc = _mm256_mul_ps(ErfcLargeScaled(a, hi, lo), InvTailScale());
  const __m256 large = CopySign(_mm256_sub_ps(Set(1.0f), erfc), x);
  return KeepNaN(_mm256_blendv_ps(large, small, _mm256_cmp_ps(a, Set(1.0f), _CMP_LT_OQ)), x);
}

// ---- gelu ------------------------------------------------------------------

// x/2 (1 + erf(x / sqrt 2)). With z = |x| / sqrt 2 >= 0.5 it is computed from
// c = erfc(z): x (1 - c/2) for x > 0 and x c/2 for x < 0, with no
// cancellation; z^2 = x^2 / 2 is split into two floats from x itself.
KILN_VMATH_INLINE __m256 GeluErf(__m256 x) {
  const __m256 x2_hi = _mm256_mul_ps(x, x);
  const __m256 x2_lo = _mm256_fmsub_ps(x, x, x2_hi);
  const __m256 z2_hi = _mm256_mul_ps(x2_hi, Set(0.5f));  // exact
  const __m256 z2_lo = _mm256_mul_ps(x2_lo, Set(0.5f));
  const __m256 z = _mm256_mul_ps(x, Set(0.70710678118654752440f));
  const __m256 a = Abs(z);
  // half_x (1 + erf z) rather than half_x + half_x erf z: gelu(-0) = -0.
  const __m256 half_x = _mm256_mul_ps(x, Set(0.5f));
  const __m256 small = _mm256_mul_ps(half_x, _mm256_fmadd_ps(z, ErfOverZSmall(z2_hi), Set(1.0f)));
  // c 2^64 / 2; x < 0 scales x c/2 down last (rounded once if subnormal).
  // gelu(-inf) = -inf * 0 = NaN, as in ATen.
  const __m256 half_cs = _mm256_mul_ps(ErfcLargeScaled(a, z2_hi, z2_lo), Set(0.5f));
  const __m256 pos = _mm256_mul_ps(x, _mm256_fnmadd_ps(half_cs, InvTailScale(), Set(1.0f)));
  const __m256 neg = _mm256_mul_ps(_mm256_mul_ps(x, half_cs), InvTailScale());
  const __m256 positive = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 large = _mm256_blendv_ps(neg, pos, positive);
  return KeepNaN(_mm256_blendv_ps(large, small, _mm256_cmp_ps(a, Set(0.5f), _CMP_LT_OQ)), x);
}

// x/2 (1 + tanh(u)), u = beta (x + kappa x^3) with ATen's float constants
// beta = sqrt(2/pi) and kappa = 0.044715, computed as x * sigmoid(2u) (the
// same function without the cancellation for x < 0). 2u = 2 beta x
// (1 + kappa x^2) is carried as s + s_lo so that e^{-|2u|} is accurate even
// where |2u| is ~100.
KILN_VMATH_INLINE __m256 GeluTanh(__m256 x) {
  const __m256 kappa = Set(0.044715f);
  const __m256 two_beta = Set(2.0f * 0.79788456080286535588f);  // exact double of beta
  const __m256 one = Set(1.0f);
  const __m256 q = _mm256_mul_ps(x, x);
  const __m256 q_lo = _mm256_fmsub_ps(x, x, q);
  const __m256 m = _mm256_mul_ps(kappa, q);
  const __m256 m_lo = _mm256_fmadd_ps(kappa, q_lo, _mm256_fmsub_ps(kappa, q, m));
  // 1 + m with its rounding error (Knuth's two-sum: m may exceed 1).
  const __m256 k = _mm256_add_ps(one, m);
  const __m256 kb = _mm256_sub_ps(k, one);
  const __m256 k_err =
      _mm256_add_ps(_mm256_sub_ps(one, _mm256_sub_ps(k, kb)), _mm256_sub_ps(m, kb));
  const __m256 k_lo = _mm256_add_ps(k_err, m_lo);
  const __m256 y = _mm256_mul_ps(x, k);  // x (1 + kappa x^2) = y + y_lo
  const __m256 y_lo = _mm256_fmadd_ps(x, k_lo, _mm256_fmsub_ps(x, k, y));
  const __m256 s = _mm256_mul_ps(two_beta, y);
  const __m256 s_lo = _mm256_fmadd_ps(two_beta, y_lo, _mm256_fmsub_ps(two_beta, y, s));
  // e^{-|s + s_lo|} = e^{-|s|} (1 - sign(s) s_lo) to first order. s_lo is
  // inf or NaN only where s overflowed; the correction is then moot.
  const __m256 nonneg = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 signed_lo = _mm256_blendv_ps(s_lo, _mm256_sub_ps(_mm256_setzero_ps(), s_lo), nonneg);
  const __m256 corr = _mm256_blendv_ps(one, _mm256_add_ps(one, signed_lo),
                                       _mm256_cmp_ps(Abs(s), Set(1e30f), _CMP_LT_OQ));
  const __m256 es = _mm256_mul_ps(ExpScaled(_mm256_or_ps(s, Set(-0.0f)), kTailScaleLog2), corr);
  return KeepNaN(TimesSigmoidTail(x, es, nonneg), x);
}

// ---- Arrays and scalars ----------------------------------------------------

// out[i] = f(in[i]) for i in [0, n), f a vector function above (or any
// __m256 -> __m256 callable). `out` may equal `in`.
template <typename F>
KILN_VMATH_INLINE void Map(const float* in, float* out, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(out + i, mask, f(_mm256_maskload_ps(in + i, mask)));
  }
}

// y[i] = e^{x[i] - shift} for i in [0, n); returns the sum of the y[i] (the
// inner step of softmax: shift >= every x[i], see ExpShifted). `y` may
// equal `x`.
KILN_VMATH_INLINE float ExpShiftedSum(const float* x, float shift, float* y, int64_t n) {
  const __m256 sv = Set(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpShifted(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 e = ExpShifted(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), sv));
    _mm256_maskstore_ps(y + i, mask, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
  }
  return HorizontalSum(acc);
}

// y[i] = e^{a x[i] + b} for i in [0, n) (the exponent rounded once, by an
// FMA); returns the sum of the y[i]. Softmax with a scale folded in:
// a = scale, b = -scale * max. `y` may equal `x`.
KILN_VMATH_INLINE float ExpAffineSum(const float* x, float a, float b, float* y, int64_t n) {
  const __m256 av = Set(a), bv = Set(b);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = ExpShifted(_mm256_fmadd_ps(_mm256_loadu_ps(x + i), av, bv));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 e = ExpShifted(_mm256_fmadd_ps(_mm256_maskload_ps(x + i, mask), av, bv));
    _mm256_maskstore_ps(y + i, mask, e);
    acc = _mm256_add_ps(acc, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
  }
  return HorizontalSum(acc);
}

// sum of x[i] * y[i] over i in [0, n), in 8 lanes then across them.
KILN_VMATH_INLINE float Dot(const float* x, const float* y, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
  }
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    acc1 = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, mask), _mm256_maskload_ps(y + i, mask), acc1);
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

// max(x[0..n)), skipping NaN like a `m = std::max(m, x[i])` loop from -inf.
KILN_VMATH_INLINE float Max(const float* x, int64_t n) {
  __m256 acc = Set(-__builtin_inff());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
  if (i < n) {
    const __m256i mask = TailMask(n - i);
    const __m256 v =
        _mm256_blendv_ps(acc, _mm256_maskload_ps(x + i, mask), _mm256_castsi256_ps(mask));
    acc = _mm256_max_ps(v, acc);
  }
  return HorizontalMax(acc);
}

// f applied to one float, bit-identical to the vector lanes.
template <typename F>
KILN_VMATH_INLINE float Scalar(float x, F f) {
  return _mm256_cvtss_f32(f(_mm256_set1_ps(x)));
}

// `v < lo ? lo : v` and `hi < v ? hi : v`: std::max / std::min as the
// unfused activation kernels call them (a NaN v passes, -0 stays -0), for
// the fused loops that must match them bit for bit.
inline __m256 StdMax(__m256 v, __m256 lo) {
  return _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
}
inline __m256 StdMin(__m256 v, __m256 hi) {
  return _mm256_blendv_ps(v, hi, _mm256_cmp_ps(hi, v, _CMP_LT_OQ));
}

// min(max(x + 3, 0), 6), hardswish's and hardsigmoid's common part.
inline __m256 Relu6OfPlus3(__m256 x) {
  return StdMin(StdMax(_mm256_add_ps(x, _mm256_set1_ps(3.f)), _mm256_setzero_ps()),
                _mm256_set1_ps(6.f));
}

}  // namespace kiln::runtime::vmath
