// kiln.conv2d on the narrow-group kernel (kernels/conv_narrow_group.h)
// against a double-precision grouped convolution computed here: kernel
// sizes, strides, padding, dilation, images too small for any pixel
// without padding, bias, residual and activations in either order, and an
// output that shares the residual's bytes.
#include <algorithm>
#include <cmath>

#include "runtime/kernels/conv_narrow_group.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct GroupCase {
  int64_t width;  // channels a group, in and out
  int64_t n, groups, h, w, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  bool bias;
  std::vector<std::string> post_ops;  // "add" reads the residual

  int64_t c() const { return groups * width; }
  int64_t oh() const { return (h + 2 * pad_h - dil_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t ow() const { return (w + 2 * pad_w - dil_w * (kw - 1) - 1) / stride_w + 1; }
};

double Activate(const std::string& op, double v) {
  if (op == "relu") return v > 0 ? v : 0;
  if (op == "silu") return v / (1 + std::exp(-v));
  ADD_FAILURE() << "no reference for " << op;
  return v;
}

struct Data {
  std::vector<float> x, wt, b, residual;  // NCHW, OIHW
};

Data MakeData(const GroupCase& k) {
  const int64_t c = k.c(), g = k.width;
  Data d;
  d.x = RandomFloats(k.n * c * k.h * k.w, 41);
  d.wt = RandomFloats(c * g * k.kh * k.kw, 42, -0.2f, 0.2f);
  d.b = RandomFloats(c, 43);
  d.residual = RandomFloats(k.n * c * k.oh() * k.ow(), 44);
  return d;
}

// The expected output, channels-last, in double.
std::vector<double> Reference(const GroupCase& k, const Data& d) {
  const int64_t c = k.c(), g = k.width, oh = k.oh(), ow = k.ow();
  std::vector<double> out(k.n * c * oh * ow);
  for (int64_t i = 0; i < k.n; ++i)
    for (int64_t o = 0; o < c; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = k.bias ? d.b[o] : 0.0;
          for (int64_t ci = 0; ci < g; ++ci)
            for (int64_t ky = 0; ky < k.kh; ++ky)
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                const int64_t iy = y * k.stride_h - k.pad_h + ky * k.dil_h;
                const int64_t ix = xx * k.stride_w - k.pad_w + kx * k.dil_w;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                const int64_t ch = o / g * g + ci;
                acc += static_cast<double>(d.x[((i * c + ch) * k.h + iy) * k.w + ix]) *
                       d.wt[((o * g + ci) * k.kh + ky) * k.kw + kx];
              }
          const int64_t at = ((i * c + o) * oh + y) * ow + xx;
          for (const std::string& op : k.post_ops) {
            acc = op == "add" ? acc + d.residual[at] : Activate(op, acc);
          }
          out[at] = acc;
        }
  return ToNhwc(out, k.n, c, oh * ow);
}

bool HasAdd(const GroupCase& k) {
  return std::find(k.post_ops.begin(), k.post_ops.end(), "add") != k.post_ops.end();
}

// Adds kiln.conv2d's arguments for `k` to t, channels-last.
void Build(OpTester& t, const GroupCase& k, const Data& d) {
  const int64_t c = k.c();
  t.AddArg(t.Input(F32({k.n, k.h, k.w, c}), ToNhwc(d.x, k.n, c, k.h * k.w)));
  t.AddArg(t.Constant(F32({c, k.width, k.kh, k.kw}), d.wt));
  t.AddArg(k.bias ? t.Constant(F32({c}), d.b) : NoneArg());
  t.AddArg(IntListArg({k.stride_h, k.stride_w}));
  t.AddArg(IntListArg({k.pad_h, k.pad_w}));
  t.AddArg(IntListArg({k.dil_h, k.dil_w}));
  t.AddArg(IntArg(k.groups));
  t.AddArg(HasAdd(k) ? t.Input(F32({k.n, k.oh(), k.ow(), c}),
                               ToNhwc(d.residual, k.n, c, k.oh() * k.ow()))
                     : NoneArg());
  Arg post_ops = IntListArg({});
  for (const std::string& op : k.post_ops) post_ops.list.push_back(StringArg(op));
  t.AddArg(post_ops);
  t.AddArg(IntArg(1));
  t.AddArg(IntArg(1));
}

// Whether the case reaches the narrow-group kernel at all (else the tests
// below would check oneDNN's instead).
bool TakesNarrowGroups(const GroupCase& k) {
  NarrowGroupConvShape s{k.n, k.c(), k.h, k.w, k.c(), k.oh(), k.ow(), k.kh, k.kw, k.groups,
                         {k.stride_h, k.stride_w}, {k.pad_h, k.pad_w}, {k.dil_h, k.dil_w},
                         ActivationLayout::kNhwc, ActivationLayout::kNhwc};
  std::vector<PostOp> ops;
  for (const std::string& op : k.post_ops) ops.push_back(*ParsePostOp(op));
  return NarrowGroupApplies(s, true, true, ops);
}

class NarrowGroupTest : public ::testing::TestWithParam<GroupCase> {};

TEST_P(NarrowGroupTest, MatchesGroupedConvolution) {
  const GroupCase& k = GetParam();
  ASSERT_TRUE(TakesNarrowGroups(k));
  OpTester t("kiln.conv2d");
  const Data d = MakeData(k);
  Build(t, k, d);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  // Sums of at most 100 products of values in [-1, 1] x [-0.2, 0.2].
  EXPECT_TRUE(AllClose(t.OutputF32(0), Reference(k, d), 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NarrowGroupTest,
    ::testing::Values(
        // ResNeXt's 3x3 (4 channels a group), 21 columns: strips of 8 and
        // 4 and single pixels between the padded borders.
        GroupCase{4, 2, 8, 9, 21, 3, 3, 1, 1, 1, 1, 1, 1, true, {"relu"}},
        // Stride 2, odd sizes, residual then relu, no bias.
        GroupCase{4, 1, 4, 13, 15, 3, 3, 2, 2, 1, 1, 1, 1, false, {"add", "relu"}},
        // Activation before the residual; 5x3 kernel, uneven padding.
        GroupCase{4, 1, 6, 12, 19, 5, 3, 1, 1, 2, 1, 1, 1, true, {"silu", "add"}},
        // Dilation 2 and stride 1x2.
        GroupCase{4, 2, 2, 11, 30, 3, 3, 1, 2, 2, 2, 2, 2, true, {}},
        // Every pixel reads padding: 2 columns under a 3-wide kernel, and
        // a 5-wide kernel on a 4-column image.
        GroupCase{4, 1, 2, 3, 2, 3, 3, 1, 1, 1, 1, 1, 1, true, {}},
        GroupCase{4, 1, 2, 4, 4, 5, 5, 1, 1, 2, 2, 1, 1, false, {"relu"}},
        // 1x1, no padding.
        GroupCase{4, 3, 10, 5, 17, 1, 1, 1, 1, 0, 0, 1, 1, true, {}},
        // 8 channels a group (RegNet's): one group a vector. The first
        // as ResNeXt's, then stride 2 with a residual, and a kernel wider
        // than the image.
        GroupCase{8, 2, 4, 9, 21, 3, 3, 1, 1, 1, 1, 1, 1, true, {"relu"}},
        GroupCase{8, 1, 3, 13, 15, 3, 3, 2, 2, 1, 1, 1, 1, false, {"add", "relu"}},
        GroupCase{8, 1, 2, 4, 4, 5, 5, 1, 1, 2, 2, 1, 1, true, {"silu"}}));

TEST(NarrowGroupTest, OutputMayShareTheResidualsBytes) {
  // plan/in_place.h lets a convolution with a residual add write over the
  // residual when nothing reads it afterwards.
  const GroupCase k{4, 2, 8, 10, 23, 3, 3, 1, 1, 1, 1, 1, 1, true, {"add", "relu"}};
  ASSERT_TRUE(TakesNarrowGroups(k));
  OpTester t("kiln.conv2d");
  const Data d = MakeData(k);
  Build(t, k, d);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  const int64_t c = k.c();
  const std::vector<float> x = ToNhwc(d.x, k.n, c, k.h * k.w);
  std::vector<float> shared = ToNhwc(d.residual, k.n, c, k.oh() * k.ow());
  const TensorMeta in_meta = F32({k.n, k.h, k.w, c});
  const TensorMeta out_meta = F32({k.n, k.oh(), k.ow(), c});
  const TensorMeta w_meta = F32({c, k.width, 3, 3}), b_meta = F32({c});
  const TensorView inputs[] = {{const_cast<float*>(x.data()), &in_meta},
                               {const_cast<float*>(d.wt.data()), &w_meta},
                               {const_cast<float*>(d.b.data()), &b_meta},
                               {shared.data(), &out_meta}};
  ASSERT_TRUE(RunOverLastInput(t.kernel(), inputs).ok());
  EXPECT_TRUE(AllClose(shared, Reference(k, d), 1e-5, 1e-5));
}

TEST(NarrowGroupTest, TakesOnlyGroupsOfFourAndEightChannelsLast) {
  const NarrowGroupConvShape base{1, 128, 56, 56, 128, 56, 56, 3, 3, 32, {1, 1}, {1, 1},
                                  {1, 1}, ActivationLayout::kNhwc, ActivationLayout::kNhwc};
  EXPECT_TRUE(NarrowGroupApplies(base, true, true, {}));
  NarrowGroupConvShape eight = base;
  eight.groups = 16;
  EXPECT_TRUE(NarrowGroupApplies(eight, true, true, {}));
  NarrowGroupConvShape wide = base;
  wide.groups = 8;  // 16 channels a group: oneDNN's blocked kernels
  EXPECT_FALSE(NarrowGroupApplies(wide, true, true, {}));
  NarrowGroupConvShape depthwise = base;
  depthwise.groups = 128;
  EXPECT_FALSE(NarrowGroupApplies(depthwise, true, true, {}));
  NarrowGroupConvShape widening = base;
  widening.oc = 256;  // 8 outputs from 4 inputs a group
  EXPECT_FALSE(NarrowGroupApplies(widening, true, true, {}));
  NarrowGroupConvShape odd = base;
  odd.groups = 3;  // 12 channels: not whole 8-channel blocks
  odd.c = odd.oc = 12;
  EXPECT_FALSE(NarrowGroupApplies(odd, true, true, {}));
  NarrowGroupConvShape two = base;
  two.groups = 64;  // 2 channels a group
  EXPECT_FALSE(NarrowGroupApplies(two, true, true, {}));
  for (ActivationLayout l : {ActivationLayout::kPlain, ActivationLayout::kBlocked}) {
    NarrowGroupConvShape other = base;
    other.layout_in = l;
    EXPECT_FALSE(NarrowGroupApplies(other, true, true, {}));
    other = base;
    other.layout_out = l;
    EXPECT_FALSE(NarrowGroupApplies(other, true, true, {}));
  }
  EXPECT_FALSE(NarrowGroupApplies(base, false, true, {}));
  EXPECT_FALSE(NarrowGroupApplies(base, true, false, {}));
}

}  // namespace
}  // namespace kiln::runtime::testing
