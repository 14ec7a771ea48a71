// Tests the transposed and 3-D forms of aten.convolution (conv_general.cc)
// against direct loops written here in double: 1-D, 2-D and 3-D
// transposed convolutions with stride, padding, output_padding, dilation,
// groups and bias; 3-D convolutions; weights as inputs and as constants.
#include <array>
#include <vector>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct ConvCase {
  std::vector<int64_t> input;   // [N, C, spatial...]
  std::vector<int64_t> weight;  // conv: [OC, C/g, k...]; transposed: [C, OC/g, k...]
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
  bool bias = false;
  bool constant_weight = false;
};

// Spatial lists padded to 3 dims (leading 1s) for one set of loops.
std::array<int64_t, 3> Spatial3(const std::vector<int64_t>& v, size_t from, int64_t fill) {
  std::array<int64_t, 3> out = {fill, fill, fill};
  const size_t n = v.size() - from;
  for (size_t i = 0; i < n; ++i) out[3 - n + i] = v[from + i];
  return out;
}
// A parameter list: one value stands for every one of the `sd` dims.
std::array<int64_t, 3> Param3(std::vector<int64_t> v, int sd, int64_t fill) {
  if (v.size() == 1) v.assign(sd, v[0]);
  return Spatial3(v, 0, fill);
}

// The expected output and its shape.
std::vector<double> Reference(const ConvCase& c, const std::vector<float>& x,
                              const std::vector<float>& w, const std::vector<float>& b,
                              std::vector<int64_t>* out_shape) {
  const int sd = static_cast<int>(c.input.size()) - 2;
  const int64_t n = c.input[0], ch = c.input[1], g = c.groups;
  const int64_t oc = c.transposed ? c.weight[1] * g : c.weight[0];
  const int64_t icg = ch / g, ocg = oc / g;
  const auto in = Spatial3(c.input, 2, 1), k = Spatial3(c.weight, 2, 1);
  const auto s = Param3(c.stride, sd, 1), p = Param3(c.padding, sd, 0);
  const auto d = Param3(c.dilation, sd, 1), op = Param3(c.output_padding, sd, 0);
  std::array<int64_t, 3> out;
  for (int i = 0; i < 3; ++i) {
    out[i] = c.transposed ? (in[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1
                          : (in[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) / s[i] + 1;
  }
  *out_shape = {n, oc};
  for (int i = 3 - sd; i < 3; ++i) out_shape->push_back(out[i]);
  const int64_t osz = out[0] * out[1] * out[2], isz = in[0] * in[1] * in[2];
  const int64_t ksz = k[0] * k[1] * k[2];
  std::vector<double> y(n * oc * osz, 0.0);
  for (int64_t bn = 0; bn < n; ++bn) {
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t ci = 0; ci < icg; ++ci) {
        for (int64_t co = 0; co < ocg; ++co) {
          const int64_t cin = gi * icg + ci, cout = gi * ocg + co;
          // conv: w[cout][ci][k]; transposed: w[cin][co][k]
          const float* wk = c.transposed ? &w[(cin * ocg + co) * ksz] : &w[(cout * icg + ci) * ksz];
          for (int64_t kz = 0; kz < k[0]; ++kz)
            for (int64_t ky = 0; ky < k[1]; ++ky)
              for (int64_t kx = 0; kx < k[2]; ++kx) {
                const double wv = wk[(kz * k[1] + ky) * k[2] + kx];
                const std::array<int64_t, 3> kk = {kz, ky, kx};
                if (c.transposed) {
                  for (int64_t iz = 0; iz < in[0]; ++iz)
                    for (int64_t iy = 0; iy < in[1]; ++iy)
                      for (int64_t ix = 0; ix < in[2]; ++ix) {
                        const std::array<int64_t, 3> ii = {iz, iy, ix};
                        std::array<int64_t, 3> o;
                        bool inside = true;
                        for (int a = 0; a < 3; ++a) {
                          o[a] = ii[a] * s[a] - p[a] + kk[a] * d[a];
                          inside = inside && o[a] >= 0 && o[a] < out[a];
                        }
                        if (!inside) continue;
                        y[(bn * oc + cout) * osz + (o[0] * out[1] + o[1]) * out[2] + o[2]] +=
                            wv * x[(bn * ch + cin) * isz + (iz * in[1] + iy) * in[2] + ix];
                      }
                } else {
                  for (int64_t oz = 0; oz < out[0]; ++oz)
                    for (int64_t oy = 0; oy < out[1]; ++oy)
                      for (int64_t ox = 0; ox < out[2]; ++ox) {
                        const std::array<int64_t, 3> oo = {oz, oy, ox};
                        std::array<int64_t, 3> i;
                        bool inside = true;
                        for (int a = 0; a < 3; ++a) {
                          i[a] = oo[a] * s[a] - p[a] + kk[a] * d[a];
                          inside = inside && i[a] >= 0 && i[a] < in[a];
                        }
                        if (!inside) continue;
                        y[(bn * oc + cout) * osz + (oz * out[1] + oy) * out[2] + ox] +=
                            wv * x[(bn * ch + cin) * isz + (i[0] * in[1] + i[1]) * in[2] + i[2]];
                      }
                }
              }
        }
      }
    }
    if (!b.empty()) {
      for (int64_t o = 0; o < oc; ++o)
        for (int64_t j = 0; j < osz; ++j) y[(bn * oc + o) * osz + j] += b[o];
    }
  }
  return y;
}

ConvCase Case(std::vector<int64_t> input, std::vector<int64_t> weight, std::vector<int64_t> stride,
              std::vector<int64_t> padding, std::vector<int64_t> dilation,
              std::vector<int64_t> output_padding, int64_t groups, bool transposed, bool bias,
              bool constant_weight) {
  ConvCase c;
  c.input = std::move(input);
  c.weight = std::move(weight);
  c.stride = std::move(stride);
  c.padding = std::move(padding);
  c.dilation = std::move(dilation);
  c.output_padding = std::move(output_padding);
  c.groups = groups;
  c.transposed = transposed;
  c.bias = bias;
  c.constant_weight = constant_weight;
  return c;
}

void ExpectMatches(const ConvCase& c) {
  int64_t xn = 1, wn = 1;
  for (int64_t v : c.input) xn *= v;
  for (int64_t v : c.weight) wn *= v;
  const int64_t oc = c.transposed ? c.weight[1] * c.groups : c.weight[0];
  const auto x = RandomFloats(xn, 11), w = RandomFloats(wn, 12);
  const auto b = c.bias ? RandomFloats(oc, 13) : std::vector<float>{};
  OpTester t("aten.convolution.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(c.constant_weight ? t.Constant(F32(c.weight), w) : t.Input(F32(c.weight), w));
  t.AddArg(c.bias ? t.Input(F32({oc}), b) : NoneArg());
  t.AddArg(IntListArg(c.stride));
  t.AddArg(IntListArg(c.padding));
  t.AddArg(IntListArg(c.dilation));
  t.AddArg(BoolArg(c.transposed));
  t.AddArg(IntListArg(c.output_padding));
  t.AddArg(IntArg(c.groups));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  std::vector<int64_t> shape;
  const std::vector<double> want = Reference(c, x, w, b, &shape);
  EXPECT_EQ(t.output_metas()[0], F32(shape));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-4, 1e-4));
}

TEST(ConvGeneralTest, Transposed2dWithEveryParameter) {
  ExpectMatches(
      Case({2, 4, 5, 6}, {4, 3, 3, 2}, {2, 1}, {1, 0}, {1, 2}, {1, 0}, 2, true, true, false));
}

TEST(ConvGeneralTest, Transposed2dWithConstantWeights) {
  ExpectMatches(Case({1, 3, 4, 4}, {3, 5, 4, 4}, {2}, {1}, {1}, {0}, 1, true, true, true));
}

TEST(ConvGeneralTest, Transposed1dAnd3d) {
  ExpectMatches(Case({2, 3, 7}, {3, 2, 3}, {3}, {0}, {1}, {0}, 1, true, false, false));
  ExpectMatches(Case({1, 2, 3, 3, 2}, {2, 3, 2, 2, 2}, {2, 2, 1}, {1, 1, 0}, {1}, {1, 1, 0}, 1,
                     true, true, false));
}

TEST(ConvGeneralTest, Conv3dPlainAndGrouped) {
  ExpectMatches(Case({2, 3, 4, 5, 4}, {4, 3, 3, 2, 2}, {1, 2, 1}, {1, 0, 1}, {1, 1, 2}, {0}, 1,
                     false, true, false));
  ExpectMatches(
      Case({1, 6, 3, 4, 4}, {6, 2, 1, 3, 3}, {1}, {0, 1, 1}, {1}, {0}, 3, false, false, true));
}

// output_padding beyond padding: the far rows and columns no input reaches
// hold the bias alone.
TEST(ConvGeneralTest, OutputPaddingPastThePadding) {
  ExpectMatches(Case({1, 2, 4, 4}, {2, 2, 3, 3}, {2}, {0}, {1}, {1}, 1, true, true, false));
  ExpectMatches(Case({2, 2, 5}, {2, 3, 2}, {3}, {0}, {1}, {2}, 1, true, false, true));
  ExpectMatches(
      Case({1, 4, 2, 3, 2}, {4, 1, 2, 2, 2}, {2}, {0, 1, 0}, {1}, {1, 1, 1}, 2, true, true, false));
}

TEST(ConvGeneralTest, RejectsMismatches) {
  OpTester bad("aten.convolution.default");  // weight for 3 input channels, not 4
  bad.SetArgs({bad.Input(F32({1, 4, 5, 5}), RandomFloats(100, 1)),
               bad.Input(F32({3, 2, 3, 3}), RandomFloats(54, 2)), NoneArg(), IntListArg({1}),
               IntListArg({0}), IntListArg({1}), BoolArg(true), IntListArg({0}), IntArg(1)});
  EXPECT_TRUE(IsInvalidArgument(bad.Prepare(), "does not fit"));

  OpTester wide("aten.convolution.default");  // output_padding must be below the stride
  wide.SetArgs({wide.Input(F32({1, 2, 4, 4}), RandomFloats(32, 1)),
                wide.Input(F32({2, 2, 3, 3}), RandomFloats(36, 2)), NoneArg(), IntListArg({2}),
                IntListArg({0}), IntListArg({1}), BoolArg(true), IntListArg({2}), IntArg(1)});
  EXPECT_TRUE(IsInvalidArgument(wide.Prepare(), "output_padding"));
}

}  // namespace
}  // namespace kiln::runtime::testing
