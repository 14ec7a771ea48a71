// kiln.conv2d on the F(2x2, 3x3) Winograd kernel (kernels/conv_winograd.h)
// against a double-precision direct convolution computed here: layouts,
// padding, odd output sizes, bias, residual and activations, runs of
// several chunks, and an output that shares the residual's bytes.
#include <cmath>

#include "runtime/kernels/conv_winograd.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct WinoCase {
  int64_t n, c, h, w, oc, pad;
  int64_t layout_in, layout_out;  // 0 plain NCHW, 1 channels-last
  bool bias;
  std::vector<std::string> post_ops;  // "add" reads the residual
};

double Activate(const std::string& op, double v) {
  if (op == "relu") return v > 0 ? v : 0;
  if (op == "silu") return v / (1 + std::exp(-v));
  ADD_FAILURE() << "no reference for " << op;
  return v;
}

// The expected output, NCHW, in double.
std::vector<double> Reference(const WinoCase& k, const std::vector<float>& x,
                              const std::vector<float>& wt, const std::vector<float>& b,
                              const std::vector<float>& residual, int64_t oh, int64_t ow) {
  std::vector<double> out(k.n * k.oc * oh * ow);
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t o = 0; o < k.oc; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = k.bias ? b[o] : 0.0;
          for (int64_t c = 0; c < k.c; ++c)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y - k.pad + ky, ix = xx - k.pad + kx;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                acc += static_cast<double>(x[((i * k.c + c) * k.h + iy) * k.w + ix]) *
                       wt[((o * k.c + c) * 3 + ky) * 3 + kx];
              }
          const int64_t at = ((i * k.oc + o) * oh + y) * ow + xx;
          for (const std::string& op : k.post_ops) {
            acc = op == "add" ? acc + residual[at] : Activate(op, acc);
          }
          out[at] = acc;
        }
  return out;
}

struct Built {
  std::vector<float> x, wt, b, residual;  // NCHW
  int64_t oh = 0, ow = 0;
};

// Adds kiln.conv2d's arguments for `k` to t (activations in k's layouts).
Built Build(OpTester& t, const WinoCase& k) {
  Built d;
  d.oh = k.h + 2 * k.pad - 2;
  d.ow = k.w + 2 * k.pad - 2;
  d.x = RandomFloats(k.n * k.c * k.h * k.w, 31);
  d.wt = RandomFloats(k.oc * k.c * 9, 32, -0.2f, 0.2f);
  d.b = RandomFloats(k.oc, 33);
  d.residual = RandomFloats(k.n * k.oc * d.oh * d.ow, 34);
  const bool has_add =
      std::find(k.post_ops.begin(), k.post_ops.end(), "add") != k.post_ops.end();
  auto shape = [](int64_t n, int64_t c, int64_t h, int64_t w, int64_t layout) {
    return layout == 1 ? std::vector<int64_t>{n, h, w, c} : std::vector<int64_t>{n, c, h, w};
  };
  t.AddArg(t.Input(F32(shape(k.n, k.c, k.h, k.w, k.layout_in)),
                   k.layout_in == 1 ? ToNhwc(d.x, k.n, k.c, k.h * k.w) : d.x));
  t.AddArg(t.Constant(F32({k.oc, k.c, 3, 3}), d.wt));
  t.AddArg(k.bias ? t.Constant(F32({k.oc}), d.b) : NoneArg());
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({k.pad, k.pad}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntArg(1));
  t.AddArg(has_add ? t.Input(F32(shape(k.n, k.oc, d.oh, d.ow, k.layout_out)),
                             k.layout_out == 1 ? ToNhwc(d.residual, k.n, k.oc, d.oh * d.ow)
                                               : d.residual)
                   : NoneArg());
  Arg post_ops = IntListArg({});
  for (const std::string& op : k.post_ops) post_ops.list.push_back(StringArg(op));
  t.AddArg(post_ops);
  t.AddArg(IntArg(k.layout_in));
  t.AddArg(IntArg(k.layout_out));
  return d;
}

// Whether the case reaches the Winograd kernel at all (else the test below
// would check oneDNN's direct kernel instead).
bool TakesWinograd(const WinoCase& k) {
  WinogradConvShape s{k.n, k.c, k.h, k.w, k.oc, k.h + 2 * k.pad - 2, k.w + 2 * k.pad - 2,
                      k.pad, k.pad, static_cast<ActivationLayout>(k.layout_in),
                      static_cast<ActivationLayout>(k.layout_out)};
  std::vector<PostOp> ops;
  for (const std::string& op : k.post_ops) ops.push_back(*ParsePostOp(op));
  return WinogradApplies(s, 3, 3, {1, 1}, {1, 1}, 1, true, true, ops);
}

class WinogradTest : public ::testing::TestWithParam<WinoCase> {};

TEST_P(WinogradTest, MatchesDirectConvolution) {
  const WinoCase& k = GetParam();
  ASSERT_TRUE(TakesWinograd(k));
  OpTester t("kiln.conv2d");
  const Built d = Build(t, k);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected = Reference(k, d.x, d.wt, d.b, d.residual, d.oh, d.ow);
  if (k.layout_out == 1) expected = ToNhwc(expected, k.n, k.oc, d.oh * d.ow);
  // Sums of a few hundred products of values in [-1, 1] x [-0.2, 0.2].
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-4, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradTest,
    ::testing::Values(
        // Channels-last both sides, odd output (13x11: partial tiles), silu.
        WinoCase{2, 64, 13, 11, 40, 1, 1, 1, true, {"silu"}},
        // Plain both sides (the input reordered, the output scattered),
        // residual then relu: a ResNet block's second convolution.
        WinoCase{1, 32, 16, 16, 48, 1, 0, 0, true, {"add", "relu"}},
        // Plain in, channels-last out, no padding, no bias.
        WinoCase{2, 40, 16, 16, 32, 0, 0, 1, false, {}},
        // Padding 2 (the output grows), activation before the residual.
        WinoCase{1, 32, 14, 15, 32, 2, 1, 1, true, {"relu", "add"}},
        // 900 tiles of 64 + 64 channels: chunks of 768 and 132 tiles.
        WinoCase{4, 64, 30, 30, 64, 1, 1, 0, true, {}}));

TEST(WinogradTest, OutputMayShareTheResidualsBytes) {
  // plan/in_place.h lets a convolution with a residual add write over the
  // residual when nothing reads it afterwards: channels-last, and plain
  // (where the output is reordered into place at the end).
  for (const WinoCase& k : {WinoCase{1, 32, 17, 15, 32, 1, 1, 1, true, {"add", "silu"}},
                            WinoCase{1, 32, 17, 15, 40, 1, 0, 0, true, {"add", "relu"}}}) {
    ASSERT_TRUE(TakesWinograd(k));
    OpTester t("kiln.conv2d");
    const Built d = Build(t, k);
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    const bool nhwc = k.layout_out == 1;
    const std::vector<float> x = nhwc ? ToNhwc(d.x, k.n, k.c, k.h * k.w) : d.x;
    std::vector<float> shared = nhwc ? ToNhwc(d.residual, k.n, k.oc, d.oh * d.ow) : d.residual;
    const TensorMeta in_meta = F32(nhwc ? std::vector<int64_t>{k.n, k.h, k.w, k.c}
                                        : std::vector<int64_t>{k.n, k.c, k.h, k.w});
    const TensorMeta out_meta = F32(nhwc ? std::vector<int64_t>{k.n, d.oh, d.ow, k.oc}
                                         : std::vector<int64_t>{k.n, k.oc, d.oh, d.ow});
    const TensorMeta w_meta = F32({k.oc, k.c, 3, 3}), b_meta = F32({k.oc});
    const TensorView inputs[] = {{const_cast<float*>(x.data()), &in_meta},
                                 {const_cast<float*>(d.wt.data()), &w_meta},
                                 {const_cast<float*>(d.b.data()), &b_meta},
                                 {shared.data(), &out_meta}};
    ASSERT_TRUE(RunOverLastInput(t.kernel(), inputs).ok());
    std::vector<double> expected = Reference(k, d.x, d.wt, d.b, d.residual, d.oh, d.ow);
    if (nhwc) expected = ToNhwc(expected, k.n, k.oc, d.oh * d.ow);
    EXPECT_TRUE(AllClose(shared, expected, 1e-4, 1e-4)) << (nhwc ? "channels-last" : "plain");
  }
}

TEST(WinogradTest, LeavesShapesItDoesNotPayForToTheDirectKernel) {
  const WinogradConvShape big{1, 64, 32, 32, 64, 32, 32, 1, 1, ActivationLayout::kNhwc,
                              ActivationLayout::kNhwc};
  EXPECT_TRUE(WinogradApplies(big, 3, 3, {1, 1}, {1, 1}, 1, true, true, {}));
  // 7x7 outputs: 16 tiles.
  WinogradConvShape small = big;
  small.h = small.w = small.oh = small.ow = 7;
  EXPECT_FALSE(WinogradApplies(small, 3, 3, {1, 1}, {1, 1}, 1, true, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 3, 3, {2, 2}, {1, 1}, 1, true, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 3, 3, {1, 1}, {2, 2}, 1, true, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 3, 3, {1, 1}, {1, 1}, 2, true, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 1, 1, {1, 1}, {1, 1}, 1, true, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 3, 3, {1, 1}, {1, 1}, 1, false, true, {}));
  EXPECT_FALSE(WinogradApplies(big, 3, 3, {1, 1}, {1, 1}, 1, true, false, {}));
  WinogradConvShape blocked = big;
  blocked.layout_out = ActivationLayout::kBlocked;
  EXPECT_FALSE(WinogradApplies(blocked, 3, 3, {1, 1}, {1, 1}, 1, true, true, {}));
  WinogradConvShape odd = big;
  odd.c = 60;  // not a multiple of 8
  EXPECT_FALSE(WinogradApplies(odd, 3, 3, {1, 1}, {1, 1}, 1, true, true, {}));
}

}  // namespace
}  // namespace kiln::runtime::testing
