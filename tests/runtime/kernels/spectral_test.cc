// Tests aten._fft_c2c, _fft_r2c and _fft_c2r (spectral.cc) against the
// DFT's definition summed here in double precision, over several dims with
// each normalization, and the complex views and conjugation around them.
#include <algorithm>
#include <cmath>
#include <complex>
#include <vector>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

using CD = std::complex<double>;

TensorMeta C64(std::vector<int64_t> shape) { return TensorMeta{DType::kC64, std::move(shape)}; }

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// The transform of x (row-major over `shape`) along each of `dims`.
std::vector<CD> Dft(std::vector<CD> x, const std::vector<int64_t>& shape,
                    const std::vector<int>& dims, int sign) {
  for (int d : dims) {
    int64_t inner = 1;
    for (size_t i = d + 1; i < shape.size(); ++i) inner *= shape[i];
    const int64_t n = shape[d], outer = Numel(shape) / (n * inner);
    std::vector<CD> y(x.size());
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        for (int64_t k = 0; k < n; ++k) {
          CD sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            const double a = sign * 2.0 * M_PI * static_cast<double>((j * k) % n) / n;
            sum += x[(o * n + j) * inner + i] * CD(std::cos(a), std::sin(a));
          }
          y[(o * n + k) * inner + i] = sum;
        }
      }
    }
    x = std::move(y);
  }
  return x;
}

std::vector<CD> ToComplex(const std::vector<float>& pairs) {
  std::vector<CD> v(pairs.size() / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = CD(pairs[2 * i], pairs[2 * i + 1]);
  return v;
}

std::vector<double> Interleave(const std::vector<CD>& v, double scale = 1) {
  std::vector<double> out;
  for (const CD& c : v) {
    out.push_back(c.real() * scale);
    out.push_back(c.imag() * scale);
  }
  return out;
}

TEST(FftC2cTest, TwoDimsOfThreeEachNormalizationBothDirections) {
  const std::vector<int64_t> shape = {2, 6, 5};
  const std::vector<float> x = RandomFloats(2 * Numel(shape), 1);
  for (bool forward : {true, false}) {
    for (int norm : {0, 1, 2}) {
      OpTester t("aten._fft_c2c.default");
      t.AddArg(t.Input(C64(shape), x));
      t.AddArg(IntListArg({-1, 1}));
      t.AddArg(IntArg(norm));
      t.AddArg(BoolArg(forward));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      EXPECT_EQ(t.output_metas()[0], C64(shape));
      ASSERT_TRUE(t.Run().ok());
      const double scale = norm == 0 ? 1 : norm == 1 ? 1 / std::sqrt(30.0) : 1 / 30.0;
      const auto want = Interleave(Dft(ToComplex(x), shape, {2, 1}, forward ? -1 : 1), scale);
      EXPECT_TRUE(AllClose(t.OutputC64(0), want, 1e-5, 1e-5 * scale * 30))
          << "forward=" << forward << " norm=" << norm;
    }
  }
}

TEST(FftC2cTest, InnerLinesInBlocksAndAPrimeLength) {
  // Along dim 0 of [67, 11]: 67 is a prime past the direct radices, and 11
  // inner lines make one block of 8 and one of 3.
  const std::vector<int64_t> shape = {67, 11};
  const std::vector<float> x = RandomFloats(2 * Numel(shape), 2);
  OpTester t("aten._fft_c2c.default");
  t.AddArg(t.Input(C64(shape), x));
  t.AddArg(IntListArg({0}));
  t.AddArg(IntArg(0));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputC64(0), Interleave(Dft(ToComplex(x), shape, {0}, -1)), 1e-5, 1e-4));
}

TEST(FftR2cTest, OnesidedKeepsHalfTheLastDimListedOddAndEven) {
  for (int64_t last : {10, 9}) {
    for (bool onesided : {true, false}) {
      const std::vector<int64_t> shape = {3, 4, last};
      const std::vector<float> x = RandomFloats(Numel(shape), 3);
      OpTester t("aten._fft_r2c.default");
      t.AddArg(t.Input(F32(shape), x));
      t.AddArg(IntListArg({0, 2}));
      t.AddArg(IntArg(2));
      t.AddArg(BoolArg(onesided));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      const int64_t keep = onesided ? last / 2 + 1 : last;
      EXPECT_EQ(t.output_metas()[0], C64({3, 4, keep}));
      ASSERT_TRUE(t.Run().ok());
      std::vector<CD> cx(x.begin(), x.end());
      const std::vector<CD> full = Dft(cx, shape, {0, 2}, -1);
      std::vector<CD> want;
      for (int64_t o = 0; o < 12; ++o) {
        for (int64_t k = 0; k < keep; ++k) want.push_back(full[o * last + k]);
      }
      EXPECT_TRUE(AllClose(t.OutputC64(0), Interleave(want, 1.0 / (3 * last)), 1e-5, 1e-6))
          << "last=" << last << " onesided=" << onesided;
    }
  }
}

TEST(FftR2cTest, EvenLengthsAlongAnInnerDimIncludingAPrimeHalf) {
  // Even lengths run at half length: 2 (a half of one value), a power of
  // two, and 134, whose half 67 is a prime past the direct radices; along
  // dim 0 of [n, 11], eleven inner lines in a block of 8 and one of 3.
  for (int64_t n : {2, 4, 64, 134}) {
    for (bool onesided : {true, false}) {
      const std::vector<int64_t> shape = {n, 11};
      const std::vector<float> x = RandomFloats(Numel(shape), 5);
      OpTester t("aten._fft_r2c.default");
      t.AddArg(t.Input(F32(shape), x));
      t.AddArg(IntListArg({0}));
      t.AddArg(IntArg(0));
      t.AddArg(BoolArg(onesided));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      const int64_t keep = onesided ? n / 2 + 1 : n;
      EXPECT_EQ(t.output_metas()[0], C64({keep, 11}));
      ASSERT_TRUE(t.Run().ok());
      const std::vector<CD> full = Dft(std::vector<CD>(x.begin(), x.end()), shape, {0}, -1);
      const std::vector<CD> want(full.begin(), full.begin() + keep * 11);
      EXPECT_TRUE(AllClose(t.OutputC64(0), Interleave(want), 1e-5, 1e-5 * n))
          << "n=" << n << " onesided=" << onesided;
    }
  }
}

TEST(FftR2cTest, EachLineIsAsExactAsItsOwnScaleAllows) {
  // Lines of magnitudes 1 down to 1e-9 side by side (loud and silent
  // frames of a signal): no line's spectrum may carry another line's
  // rounding error, so each is checked against its own scale.
  const int64_t rows = 19, n = 256;
  std::vector<float> x = RandomFloats(rows * n, 6);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) x[r * n + j] *= static_cast<float>(std::pow(10.0, -0.5 * r));
  }
  OpTester t("aten._fft_r2c.default");
  t.AddArg(t.Input(F32({rows, n}), x));
  t.AddArg(IntListArg({1}));
  t.AddArg(IntArg(0));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> got = t.OutputC64(0);
  const std::vector<CD> full = Dft(std::vector<CD>(x.begin(), x.end()), {rows, n}, {1}, -1);
  const int64_t keep = n / 2 + 1;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> want;
    std::vector<float> line(got.begin() + 2 * r * keep, got.begin() + 2 * (r + 1) * keep);
    double scale = 0;
    for (int64_t k = 0; k < keep; ++k) {
      want.push_back(full[r * n + k].real());
      want.push_back(full[r * n + k].imag());
      scale = std::max(scale, std::abs(full[r * n + k]));
    }
    EXPECT_TRUE(AllClose(line, want, 1e-5, 1e-6 * scale)) << "row " << r;
  }
}

TEST(FftC2rTest, HermitianHalfToRealIgnoringImaginaryPartsATenIgnores) {
  // Any complex half spectrum: the output is the real signal whose
  // transform has that half, the imaginary parts of values 0 and n/2 (which
  // a real signal's transform cannot have) ignored.
  for (int64_t n : {8, 7}) {
    const std::vector<int64_t> in_shape = {5, n / 2 + 1};
    const std::vector<float> x = RandomFloats(2 * Numel(in_shape), 4);
    OpTester t("aten._fft_c2r.default");
    t.AddArg(t.Input(C64(in_shape), x));
    t.AddArg(IntListArg({0, 1}));
    t.AddArg(IntArg(2));
    t.AddArg(IntArg(n));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32({5, n}));
    ASSERT_TRUE(t.Run().ok());
    // Reference: the inverse over dim 0, then the Hermitian extension of
    // each row and its inverse, real part, scaled by 1 / (5 n).
    const std::vector<CD> rows = Dft(ToComplex(x), in_shape, {0}, 1);
    std::vector<CD> full(5 * n);
    for (int64_t r = 0; r < 5; ++r) {
      for (int64_t k = 0; k < n; ++k) {
        full[r * n + k] = k <= n / 2 ? rows[r * (n / 2 + 1) + k]
                                     : std::conj(rows[r * (n / 2 + 1) + n - k]);
      }
    }
    const std::vector<CD> y = Dft(full, {5, n}, {1}, 1);
    std::vector<double> want;
    for (const CD& v : y) want.push_back(v.real() / (5.0 * n));
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-5, 1e-6)) << "n=" << n;
  }
}

TEST(FftC2rTest, InvertsR2c) {
  const std::vector<int64_t> shape = {6, 12};
  const std::vector<float> x = RandomFloats(Numel(shape), 5);
  OpTester fwd("aten._fft_r2c.default");
  fwd.AddArg(fwd.Input(F32(shape), x));
  fwd.AddArg(IntListArg({0, 1}));
  fwd.AddArg(IntArg(0));
  fwd.AddArg(BoolArg(true));
  ASSERT_TRUE(fwd.Prepare().ok());
  ASSERT_TRUE(fwd.Run().ok());
  OpTester bwd("aten._fft_c2r.default");
  bwd.AddArg(bwd.Input(C64({6, 7}), fwd.OutputC64(0)));
  bwd.AddArg(IntListArg({0, 1}));
  bwd.AddArg(IntArg(2));
  bwd.AddArg(IntArg(12));
  ASSERT_TRUE(bwd.Prepare().ok()) << bwd.Prepare();
  ASSERT_TRUE(bwd.Run().ok());
  EXPECT_TRUE(AllClose(bwd.OutputF32(0), std::vector<double>(x.begin(), x.end()), 1e-5, 1e-6));
}

TEST(ComplexViewsTest, ViewAsRealAndBackAndConjugates) {
  const std::vector<float> x = RandomFloats(2 * 6, 6);
  OpTester re("aten.view_as_real.default");
  re.AddArg(re.Input(C64({2, 3}), x));
  ASSERT_TRUE(re.Prepare().ok());
  EXPECT_EQ(re.output_metas()[0], F32({2, 3, 2}));
  ASSERT_TRUE(re.Run().ok());
  EXPECT_TRUE(AllClose(re.OutputF32(0), std::vector<double>(x.begin(), x.end()), 0, 0));

  OpTester cx("aten.view_as_complex.default");
  cx.AddArg(cx.Input(F32({2, 3, 2}), x));
  ASSERT_TRUE(cx.Prepare().ok());
  EXPECT_EQ(cx.output_metas()[0], C64({2, 3}));
  ASSERT_TRUE(cx.Run().ok());
  EXPECT_TRUE(AllClose(cx.OutputC64(0), std::vector<double>(x.begin(), x.end()), 0, 0));

  for (const char* op : {"aten._conj.default", "aten._conj_physical.default",
                         "aten.conj_physical.default"}) {
    OpTester c(op);
    c.AddArg(c.Input(C64({6}), x));
    ASSERT_TRUE(c.Prepare().ok());
    ASSERT_TRUE(c.Run().ok());
    std::vector<double> want(x.begin(), x.end());
    for (size_t i = 1; i < want.size(); i += 2) want[i] = -want[i];
    EXPECT_TRUE(AllClose(c.OutputC64(0), want, 0, 0)) << op;
  }
  // A real tensor is its own conjugate; resolve_conj copies.
  for (const char* op : {"aten._conj.default", "aten.resolve_conj.default"}) {
    OpTester c(op);
    c.AddArg(c.Input(F32({4}), {1, -2, 3, -4}));
    ASSERT_TRUE(c.Prepare().ok());
    ASSERT_TRUE(c.Run().ok());
    EXPECT_TRUE(AllClose(c.OutputF32(0), {1, -2, 3, -4}, 0, 0)) << op;
  }
}

TEST(SpectralTest, RefusesWhatATenRefuses) {
  auto prepare = [](const char* op, TensorMeta meta, std::vector<Arg> rest) {
    OpTester t(op);
    t.AddArg(t.Input(meta, std::vector<float>(meta.NumElements() * 2)));
    for (Arg& a : rest) t.AddArg(std::move(a));
    return t.Prepare();
  };
  // c2c of a real tensor, a dim twice, a dim out of range, normalization 3.
  EXPECT_FALSE(prepare("aten._fft_c2c.default", F32({4}),
                       {IntListArg({0}), IntArg(0), BoolArg(true)}).ok());
  EXPECT_FALSE(prepare("aten._fft_c2c.default", C64({4, 4}),
                       {IntListArg({0, -2}), IntArg(0), BoolArg(true)}).ok());
  EXPECT_FALSE(prepare("aten._fft_c2c.default", C64({4}),
                       {IntListArg({1}), IntArg(0), BoolArg(true)}).ok());
  EXPECT_FALSE(prepare("aten._fft_c2c.default", C64({4}),
                       {IntListArg({0}), IntArg(3), BoolArg(true)}).ok());
  // A 0-dim tensor has no dim to transform (ATen refuses it too).
  EXPECT_FALSE(prepare("aten._fft_c2c.default", C64({}),
                       {IntListArg({0}), IntArg(0), BoolArg(true)}).ok());
  EXPECT_FALSE(prepare("aten._fft_r2c.default", F32({}),
                       {IntListArg({-1}), IntArg(0), BoolArg(true)}).ok());
  // r2c of a complex tensor, or over a dim of no points.
  EXPECT_FALSE(prepare("aten._fft_r2c.default", C64({4}),
                       {IntListArg({0}), IntArg(0), BoolArg(true)}).ok());
  EXPECT_FALSE(prepare("aten._fft_r2c.default", F32({3, 0}),
                       {IntListArg({1}), IntArg(0), BoolArg(true)}).ok());
  // c2r to 10 points from fewer than 6 values, or to none.
  EXPECT_FALSE(prepare("aten._fft_c2r.default", C64({5}),
                       {IntListArg({0}), IntArg(0), IntArg(10)}).ok());
  EXPECT_FALSE(prepare("aten._fft_c2r.default", C64({5}),
                       {IntListArg({0}), IntArg(0), IntArg(0)}).ok());
  // view_as_complex needs a last dim of 2; view_as_real a complex tensor.
  EXPECT_FALSE(prepare("aten.view_as_complex.default", F32({3, 3}), {}).ok());
  EXPECT_FALSE(prepare("aten.view_as_real.default", F32({3, 2}), {}).ok());
}

}  // namespace
}  // namespace kiln::runtime::testing
