// Tests aten.convolution.default against a naive double-precision 2-D
// convolution computed here.
#include <array>
#include <thread>

#include "runtime/kernels/onednn_util.h"
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct ConvCase {
  std::vector<int64_t> input;   // NCHW
  std::vector<int64_t> weight;  // OIHW (I = C / groups)
  bool bias;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool constant_weights;
};

std::vector<double> ReferenceConv(const ConvCase& c,
                                  const std::vector<float>& x,
                                  const std::vector<float>& w,
                                  const std::vector<float>* b,
                                  std::vector<int64_t>* out_shape) {
  const int64_t n = c.input[0], ch = c.input[1], h = c.input[2],
                wd = c.input[3];
  const int64_t oc = c.weight[0], icg = c.weight[1], kh = c.weight[2],
                kw = c.weight[3];
  const int64_t oh =
      (h + 2 * c.padding[0] - c.dilation[0] * (kh - 1) - 1) / c.stride[0] + 1;
  const int64_t ow =
      (wd + 2 * c.padding[1] - c.dilation[1] * (kw - 1) - 1) / c.stride[1] + 1;
  *out_shape = {n, oc, oh, ow};
  const int64_t ocg = oc / c.groups;
  std::vector<double> out(n * oc * oh * ow);
  for (int64_t in = 0; in < n; ++in)
    for (int64_t o = 0; o < oc; ++o) {
      const int64_t g = o / ocg;
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = b ? (*b)[o] : 0.0;
          for (int64_t i = 0; i < icg; ++i)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy =
                    y * c.stride[0] - c.padding[0] + ky * c.dilation[0];
                const int64_t ix =
                    xx * c.stride[1] - c.padding[1] + kx * c.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t ci = g * icg + i;
                acc += static_cast<double>(
                           x[((in * ch + ci) * h + iy) * wd + ix]) *
                       w[((o * icg + i) * kh + ky) * kw + kx];
              }
          out[((in * oc + o) * oh + y) * ow + xx] = acc;
        }
    }
  return out;
}

void BuildConv(OpTester& t, const ConvCase& c, const std::vector<float>& x,
               const std::vector<float>& w, const std::vector<float>& b) {
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(c.constant_weights ? t.Constant(F32(c.weight), w)
                              : t.Input(F32(c.weight), w));
  if (c.bias) {
    t.AddArg(c.constant_weights ? t.Constant(F32({c.weight[0]}), b)
                                : t.Input(F32({c.weight[0]}), b));
  } else {
    t.AddArg(NoneArg());
  }
  t.AddArg(IntListArg({c.stride[0], c.stride[1]}));
  t.AddArg(IntListArg({c.padding[0], c.padding[1]}));
  t.AddArg(IntListArg({c.dilation[0], c.dilation[1]}));
  t.AddArg(BoolArg(false));
  t.AddArg(IntListArg({0, 0}));
  t.AddArg(IntArg(c.groups));
}

class ConvolutionTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvolutionTest, MatchesReference) {
  const ConvCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 1);
  const auto w = RandomFloats(NumElements(c.weight), 2);
  const auto b = RandomFloats(c.weight[0], 3);
  OpTester t("aten.convolution.default");
  BuildConv(t, c, x, w, b);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  std::vector<int64_t> shape;
  const auto expected = ReferenceConv(c, x, w, c.bias ? &b : nullptr, &shape);
  ASSERT_EQ(t.output_metas().size(), 1u);
  EXPECT_EQ(t.output_metas()[0], F32(shape));
  ASSERT_TRUE(t.Run().ok());
  // Sums of up to a few thousand products of values in [-1, 1]: float
  // accumulation error stays well below 1e-4 absolute.
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-4, 1e-4));
}

// precision bf16: within bf16's error of the reference, and not f32-exact.
// DISABLED_ until runtime/kernels/convolution.cc reads args.options() (see
// ComputeType and AttrFor in kernels/onednn_util.h); then drop the prefix.
TEST_P(ConvolutionTest, Bf16IsWithinBf16ToleranceButNotF32Exact) {
  CompileOptions bf16;
  bf16.precision = Precision::kBf16;
  if (ComputeType(bf16) != dnnl::memory::data_type::bf16) {
    GTEST_SKIP() << "this CPU has no native bf16 dot products; bf16 runs in f32";
  }
  const ConvCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.input), 1);
  const auto w = RandomFloats(NumElements(c.weight), 2);
  const auto b = RandomFloats(c.weight[0], 3);
  OpTester t("aten.convolution.default");
  t.SetOptions(bf16);
  BuildConv(t, c, x, w, b);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<int64_t> shape;
  const auto expected = ReferenceConv(c, x, w, c.bias ? &b : nullptr, &shape);
  const std::vector<float> got = t.OutputF32(0);
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  EXPECT_LT(err / scale, 1e-2);
  EXPECT_GT(err / scale, 1e-5) << "no bf16 rounding visible: computed in f32?";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvolutionTest,
    ::testing::Values(
        // resnet18 stem: 7x7 stride 2 pad 3.
        ConvCase{{1, 3, 32, 32}, {8, 3, 7, 7}, false, {2, 2}, {3, 3}, {1, 1},
                 1, true},
        // 3x3 pad 1 with bias, batch 2.
        ConvCase{{2, 16, 9, 9}, {32, 16, 3, 3}, true, {1, 1}, {1, 1}, {1, 1},
                 1, true},
        // 1x1 stride 2 downsample.
        ConvCase{{1, 16, 8, 8}, {32, 16, 1, 1}, false, {2, 2}, {0, 0}, {1, 1},
                 1, true},
        // Asymmetric stride/padding/dilation, non-square input.
        ConvCase{{1, 4, 11, 7}, {6, 4, 3, 2}, true, {2, 1}, {2, 0}, {2, 3}, 1,
                 true},
        // Grouped and depthwise.
        ConvCase{{2, 8, 7, 7}, {12, 2, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 4,
                 true},
        ConvCase{{1, 16, 10, 10}, {16, 1, 3, 3}, false, {2, 2}, {1, 1},
                 {1, 1}, 16, true},
        // Depthwise with a channel count that is no multiple of the SIMD
        // width (shufflenet's 58), 5x5 stride 2 (mobilenet_v3, efficientnet).
        ConvCase{{2, 58, 11, 9}, {58, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1},
                 58, true},
        ConvCase{{1, 40, 13, 13}, {40, 1, 5, 5}, true, {2, 2}, {2, 2}, {1, 1},
                 40, true},
        // Weights computed by the graph (not constants): run-time reorder.
        ConvCase{{1, 16, 9, 9}, {32, 16, 3, 3}, true, {1, 1}, {1, 1}, {1, 1},
                 1, false},
        ConvCase{{2, 8, 6, 6}, {8, 4, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, 2,
                 false}));

TEST(ConvolutionTest, AcceptsSingleIntListsAndKwargs) {
  const ConvCase c{{1, 3, 8, 8}, {4, 3, 3, 3}, false, {2, 2}, {1, 1},
                   {1, 1}, 1, true};
  const auto x = RandomFloats(NumElements(c.input), 4);
  const auto w = RandomFloats(NumElements(c.weight), 5);
  OpTester t("aten.convolution.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(t.Constant(F32(c.weight), w));
  t.AddKwarg("bias", NoneArg());
  t.AddKwarg("stride", IntArg(2));
  t.AddKwarg("padding", IntArg(1));
  t.AddKwarg("dilation", IntArg(1));
  t.AddKwarg("transposed", BoolArg(false));
  t.AddKwarg("output_padding", IntListArg({0}));
  t.AddKwarg("groups", IntArg(1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<int64_t> shape;
  EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceConv(c, x, w, nullptr, &shape),
                       1e-4, 1e-4));
}

// A 1-D convolution ([N, C, L]) equals the 2-D one of height 1, with
// grouping, stride, padding, dilation and bias, constant weights or not.
TEST(ConvolutionTest, OneDimensionalMatchesReference) {
  for (bool constant : {false, true}) {
    const ConvCase c{{2, 6, 1, 19}, {4, 3, 1, 5}, true, {1, 2}, {0, 3}, {1, 2}, 2, constant};
    const auto x = RandomFloats(NumElements(c.input), 21);
    const auto w = RandomFloats(NumElements(c.weight), 22);
    const auto b = RandomFloats(4, 23);
    OpTester t("aten.convolution.default");
    t.AddArg(t.Input(F32({2, 6, 19}), x));
    t.AddArg(constant ? t.Constant(F32({4, 3, 5}), w) : t.Input(F32({4, 3, 5}), w));
    t.AddArg(constant ? t.Constant(F32({4}), b) : t.Input(F32({4}), b));
    t.AddArg(IntListArg({2}));
    t.AddArg(IntListArg({3}));
    t.AddArg(IntListArg({2}));
    t.AddArg(BoolArg(false));
    t.AddArg(IntListArg({0}));
    t.AddArg(IntArg(2));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    std::vector<int64_t> shape;
    const auto expected = ReferenceConv(c, x, w, &b, &shape);
    EXPECT_EQ(t.output_metas()[0], F32({shape[0], shape[1], shape[3]}));
    ASSERT_TRUE(t.Run().ok());
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-4, 1e-4));
  }
  OpTester bad("aten.convolution.default");
  bad.AddArg(bad.Input(F32({1, 2, 8}), RandomFloats(16, 24)));
  bad.AddArg(bad.Input(F32({3, 2, 1, 3}), RandomFloats(18, 25)));
  bad.AddArg(NoneArg());
  for (int i = 0; i < 3; ++i) bad.AddArg(IntListArg({1}));
  bad.AddArg(BoolArg(false));
  bad.AddArg(IntListArg({0}));
  bad.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(bad.Prepare(), "weight must be 3-D"));
}

TEST(ConvolutionTest, RunsConcurrentlyFromSeveralThreads) {
  const ConvCase c{{1, 32, 14, 14}, {32, 32, 3, 3}, true, {1, 1}, {1, 1},
                   {1, 1}, 1, true};
  const auto x = RandomFloats(NumElements(c.input), 6);
  const auto w = RandomFloats(NumElements(c.weight), 7);
  const auto b = RandomFloats(32, 8);
  OpTester t("aten.convolution.default");
  BuildConv(t, c, x, w, b);
  ASSERT_TRUE(t.Prepare().ok());
  std::vector<int64_t> shape;
  const auto expected = ReferenceConv(c, x, w, &b, &shape);
  const size_t bytes = t.output_metas()[0].ByteSize();
  std::vector<std::vector<AlignedBuffer>> outs(4);
  std::vector<absl::Status> status(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    outs[i].emplace_back(bytes);
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 5 && status[i].ok(); ++rep) {
        status[i] = t.RunInto(outs[i]);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i];
    std::vector<float> got(expected.size());
    std::memcpy(got.data(), outs[i][0].data(), bytes);
    EXPECT_TRUE(AllClose(got, expected, 1e-4, 1e-4)) << "thread " << i;
  }
}

// kiln.conv2d depthwise in channels-last with fused activations: the
// layout and post-ops the compiled mobilenets run their depthwise
// convolutions with (on AVX2, oneDNN's jit_dw kernel).
TEST(ConvolutionTest, DepthwiseChannelsLastWithPostOpsMatchesReference) {
  for (const ConvCase& c :
       {ConvCase{{2, 72, 10, 12}, {72, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 72, true},
        ConvCase{{1, 58, 9, 9}, {58, 1, 5, 5}, true, {2, 2}, {2, 2}, {1, 1}, 58, true}}) {
    const auto x = RandomFloats(NumElements(c.input), 11);
    const auto w = RandomFloats(NumElements(c.weight), 12);
    const auto b = RandomFloats(c.weight[0], 13);
    const int64_t n = c.input[0], ch = c.input[1], h = c.input[2], wd = c.input[3];
    std::vector<float> x_nhwc(x.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < ch; ++k)
        for (int64_t p = 0; p < h * wd; ++p) {
          x_nhwc[(i * h * wd + p) * ch + k] = x[(i * ch + k) * h * wd + p];
        }
    OpTester t("kiln.conv2d");
    t.AddArg(t.Input(F32({n, h, wd, ch}), x_nhwc));
    t.AddArg(t.Constant(F32(c.weight), w));
    t.AddArg(t.Constant(F32({c.weight[0]}), b));
    t.AddArg(IntListArg({c.stride[0], c.stride[1]}));
    t.AddArg(IntListArg({c.padding[0], c.padding[1]}));
    t.AddArg(IntListArg({c.dilation[0], c.dilation[1]}));
    t.AddArg(IntArg(c.groups));
    t.AddArg(NoneArg());
    Arg post_ops = IntListArg({});
    post_ops.list.push_back(StringArg("hardswish"));
    t.AddArg(post_ops);
    t.AddArg(IntArg(1));
    t.AddArg(IntArg(1));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    std::vector<int64_t> shape;
    const auto conv = ReferenceConv(c, x, w, &b, &shape);
    const int64_t oh = shape[2], ow = shape[3];
    EXPECT_EQ(t.output_metas()[0], F32({n, oh, ow, ch}));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected(conv.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < ch; ++k)
        for (int64_t p = 0; p < oh * ow; ++p) {
          const double v = conv[(i * ch + k) * oh * ow + p];
          expected[(i * oh * ow + p) * ch + k] = v * std::min(6.0, std::max(0.0, v + 3)) / 6;
        }
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-4, 1e-4)) << ch << " channels";
  }
}

TEST(ConvolutionTest, EmptyBatchProducesEmptyOutput) {
  const ConvCase c{{0, 3, 8, 8}, {4, 3, 3, 3}, true, {1, 1}, {1, 1}, {1, 1},
                   1, true};
  OpTester t("aten.convolution.default");
  BuildConv(t, c, {}, RandomFloats(108, 1), RandomFloats(4, 2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({0, 4, 8, 8}));
  EXPECT_TRUE(t.Run().ok());
}

absl::Status PrepareConv(const ConvCase& c) {
  OpTester t("aten.convolution.default");
  BuildConv(t, c, RandomFloats(NumElements(c.input), 1),
            RandomFloats(NumElements(c.weight), 2),
            RandomFloats(c.weight[0], 3));
  return t.Prepare();
}

TEST(ConvolutionTest, ConvolutionRejectsGroupsNotDividingChannels) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareConv({{1, 6, 8, 8}, {4, 1, 3, 3}, false, {1, 1}, {1, 1}, {1, 1},
                   4, true}),
      "groups (4) must divide the input channels (6)"));
}

TEST(ConvolutionTest, ConvolutionRejectsWeightChannelMismatch) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareConv({{1, 6, 8, 8}, {4, 5, 3, 3}, false, {1, 1}, {1, 1}, {1, 1},
                   1, true}),
      "input channels"));
}

TEST(ConvolutionTest, ConvolutionRejectsNonPositiveStride) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareConv({{1, 3, 8, 8}, {4, 3, 3, 3}, false, {0, 1}, {1, 1}, {1, 1},
                   1, true}),
      "stride must be positive"));
}

// [N, C, H, W] data in the blocked layout [N, C/8, H, W, 8] and back.
template <typename T>
std::vector<T> ToBlocked(const std::vector<T>& x, int64_t n, int64_t c, int64_t hw) {
  std::vector<T> out(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) {
        out[((i * (c / 8) + k / 8) * hw + p) * 8 + k % 8] = x[(i * c + k) * hw + p];
      }
  return out;
}

// kiln.conv2d in the blocked layout (layout code 2): a plain RGB input
// into a blocked output, blocked to blocked with a fused residual add,
// depthwise blocked, blocked into a plain output, and a squeeze-excitation
// block's 1x1 convolutions from 110 plain channels (no multiple of 8,
// which oneDNN's blocked kernels do not take) into a blocked output, with
// and without a residual.
TEST(ConvolutionTest, BlockedLayoutsMatchReference) {
  struct BlockedCase {
    ConvCase conv;
    int64_t layout_in, layout_out;
    bool residual;
  };
  for (const BlockedCase& bc : {
           BlockedCase{{{2, 3, 9, 9}, {16, 3, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1, true}, 0,
                       2, false},
           BlockedCase{{{2, 16, 7, 7}, {24, 16, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1, true}, 2,
                       2, true},
           BlockedCase{{{1, 24, 10, 12}, {24, 1, 3, 3}, true, {2, 2}, {1, 1}, {1, 1}, 24, true},
                       2, 2, false},
           BlockedCase{{{1, 32, 6, 6}, {12, 32, 1, 1}, false, {1, 1}, {0, 0}, {1, 1}, 1, true}, 2,
                       0, false},
           BlockedCase{{{2, 110, 1, 1}, {440, 110, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1, true},
                       0, 2, false},
           BlockedCase{{{1, 52, 3, 5}, {208, 52, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1, true},
                       0, 2, true}}) {
    const ConvCase& c = bc.conv;
    const auto x = RandomFloats(NumElements(c.input), 21);
    const auto w = RandomFloats(NumElements(c.weight), 22);
    const auto b = RandomFloats(c.weight[0], 23);
    std::vector<int64_t> shape;
    const auto conv = ReferenceConv(c, x, w, c.bias ? &b : nullptr, &shape);
    const int64_t n = shape[0], oc = shape[1], ohw = shape[2] * shape[3];
    const auto residual = RandomFloats(conv.size(), 24);
    auto layout_shape = [](std::vector<int64_t> s, int64_t layout) {
      return layout == 2 ? std::vector<int64_t>{s[0], s[1] / 8, s[2], s[3], 8} : s;
    };
    OpTester t("kiln.conv2d");
    const int64_t ihw = c.input[2] * c.input[3];
    t.AddArg(t.Input(F32(layout_shape(c.input, bc.layout_in)),
                     bc.layout_in == 2 ? ToBlocked(x, c.input[0], c.input[1], ihw) : x));
    t.AddArg(t.Constant(F32(c.weight), w));
    t.AddArg(c.bias ? t.Constant(F32({c.weight[0]}), b) : NoneArg());
    t.AddArg(IntListArg({c.stride[0], c.stride[1]}));
    t.AddArg(IntListArg({c.padding[0], c.padding[1]}));
    t.AddArg(IntListArg({c.dilation[0], c.dilation[1]}));
    t.AddArg(IntArg(c.groups));
    Arg post_ops = IntListArg({});
    if (bc.residual) {
      t.AddArg(t.Input(F32(layout_shape(shape, bc.layout_out)),
                       bc.layout_out == 2 ? ToBlocked(residual, n, oc, ohw) : residual));
      post_ops.list.push_back(StringArg("add"));
    } else {
      t.AddArg(NoneArg());
    }
    t.AddArg(post_ops);
    t.AddArg(IntArg(bc.layout_in));
    t.AddArg(IntArg(bc.layout_out));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32(layout_shape(shape, bc.layout_out)));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected = conv;
    if (bc.residual) {
      for (size_t i = 0; i < expected.size(); ++i) expected[i] += residual[i];
    }
    if (bc.layout_out == 2) expected = ToBlocked(expected, n, oc, ohw);
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 1e-4, 1e-4)) << c.weight[0] << " channels";
  }
}

TEST(ConvolutionTest, BlockedOutputRejectsChannelsNotAMultipleOfEight) {
  OpTester t("kiln.conv2d");
  t.AddArg(t.Input(F32({1, 3, 8, 8}), RandomFloats(192, 1)));
  t.AddArg(t.Constant(F32({12, 3, 3, 3}), RandomFloats(324, 2)));
  t.AddArg(NoneArg());
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntArg(1));
  t.AddArg(NoneArg());
  t.AddArg(IntListArg({}));
  t.AddArg(IntArg(0));
  t.AddArg(IntArg(2));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "multiple of 8"));
}

TEST(ConvolutionTest, ConvolutionRejectsKernelLargerThanPaddedInput) {
  EXPECT_TRUE(IsInvalidArgument(
      PrepareConv({{1, 3, 4, 4}, {4, 3, 7, 7}, false, {1, 1}, {1, 1}, {1, 1},
                   1, true}),
      "smaller than the dilated kernel size 7"));
}

TEST(ConvolutionTest, ConvolutionRejectsBiasOfWrongSize) {
  OpTester t("aten.convolution.default");
  t.AddArg(t.Input(F32({1, 3, 8, 8}), RandomFloats(192, 1)));
  t.AddArg(t.Constant(F32({4, 3, 3, 3}), RandomFloats(108, 2)));
  t.AddArg(t.Constant(F32({5}), RandomFloats(5, 3)));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(BoolArg(false));
  t.AddArg(IntListArg({0, 0}));
  t.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "bias must have shape [4]"));
}

// Transposed and 3-D convolutions are conv_general.cc's (its own tests);
// four spatial dims are nobody's.
TEST(ConvolutionTest, ConvolutionReportsFourSpatialDimsAsUnimplemented) {
  OpTester t("aten.convolution.default");
  t.AddArg(t.Input(F32({1, 3, 2, 2, 2, 2}), RandomFloats(48, 1)));
  t.AddArg(t.Constant(F32({4, 3, 1, 1, 1, 1}), RandomFloats(12, 2)));
  t.AddArg(NoneArg());
  t.AddArg(IntListArg({1}));
  t.AddArg(IntListArg({0}));
  t.AddArg(IntListArg({1}));
  t.AddArg(BoolArg(false));
  t.AddArg(IntListArg({0}));
  t.AddArg(IntArg(1));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST(ConvolutionTest, ConvolutionRejectsNonF32Input) {
  OpTester t("aten.convolution.default");
  std::vector<int64_t> x(192, 1);
  t.AddArg(t.RawInput(TensorMeta{DType::kI64, {1, 3, 8, 8}}, x.data(),
                      x.size() * 8));
  t.AddArg(t.Constant(F32({4, 3, 3, 3}), RandomFloats(108, 2)));
  t.AddArg(NoneArg());
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(IntListArg({1, 1}));
  t.AddArg(BoolArg(false));
  t.AddArg(IntListArg({0, 0}));
  t.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "input must be f32"));
}

// [N, C, H, W] data in activation layout `layout` (0 plain, 1 channels-last,
// 2 blocked).
std::vector<float> InLayout(const std::vector<float>& x, const std::vector<int64_t>& nchw,
                            int64_t layout) {
  const int64_t n = nchw[0], c = nchw[1], hw = nchw[2] * nchw[3];
  if (layout == 2) return ToBlocked(x, n, c, hw);
  if (layout == 0) return x;
  std::vector<float> out(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t p = 0; p < hw; ++p) out[(i * hw + p) * c + k] = x[(i * c + k) * hw + p];
  return out;
}

std::vector<int64_t> LayoutShape(const std::vector<int64_t>& s, int64_t layout) {
  if (layout == 2) return {s[0], s[1] / 8, s[2], s[3], 8};
  if (layout == 1) return {s[0], s[2], s[3], s[1]};
  return s;
}

// The "channel_affine" post-op (a batch norm after an activation):
// relu, then x * scale[c] + shift[c], then the residual (or the residual
// first), in every activation layout, dense and depthwise.
TEST(ConvolutionTest, ChannelAffinePostOpMatchesReference) {
  struct AffineCase {
    ConvCase conv;
    int64_t layout;
    bool add_first;
  };
  for (const AffineCase& ac : {
           AffineCase{{{1, 16, 7, 7}, {24, 16, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 1, true}, 0,
                      false},
           AffineCase{{{2, 16, 7, 7}, {24, 16, 1, 1}, true, {1, 1}, {0, 0}, {1, 1}, 1, true}, 1,
                      false},
           AffineCase{{{1, 32, 9, 9}, {32, 1, 7, 7}, true, {1, 1}, {3, 3}, {1, 1}, 32, true}, 1,
                      false},
           AffineCase{{{1, 16, 6, 6}, {16, 16, 3, 3}, false, {1, 1}, {1, 1}, {1, 1}, 1, true}, 2,
                      false},
           AffineCase{{{1, 24, 8, 8}, {24, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 24, true}, 1,
                      true}}) {
    const ConvCase& c = ac.conv;
    const auto x = RandomFloats(NumElements(c.input), 31);
    const auto w = RandomFloats(NumElements(c.weight), 32);
    const auto b = RandomFloats(c.weight[0], 33);
    std::vector<int64_t> shape;
    const auto conv = ReferenceConv(c, x, w, c.bias ? &b : nullptr, &shape);
    const int64_t oc = shape[1], ohw = shape[2] * shape[3];
    const auto residual = RandomFloats(conv.size(), 34);
    const auto scale = RandomFloats(oc, 35);
    const auto shift = RandomFloats(oc, 36);
    OpTester t("kiln.conv2d");
    t.AddArg(t.Input(F32(LayoutShape(c.input, ac.layout)), InLayout(x, c.input, ac.layout)));
    t.AddArg(t.Constant(F32(c.weight), w));
    t.AddArg(c.bias ? t.Constant(F32({oc}), b) : NoneArg());
    t.AddArg(IntListArg({c.stride[0], c.stride[1]}));
    t.AddArg(IntListArg({c.padding[0], c.padding[1]}));
    t.AddArg(IntListArg({c.dilation[0], c.dilation[1]}));
    t.AddArg(IntArg(c.groups));
    t.AddArg(t.Input(F32(LayoutShape(shape, ac.layout)), InLayout(residual, shape, ac.layout)));
    Arg post_ops = IntListArg({});
    for (const char* op : ac.add_first ? std::vector<const char*>{"relu", "add", "channel_affine"}
                                       : std::vector<const char*>{"relu", "channel_affine", "add"}) {
      post_ops.list.push_back(StringArg(op));
    }
    t.AddArg(post_ops);
    t.AddArg(IntArg(ac.layout));
    t.AddArg(IntArg(ac.layout));
    t.AddArg(t.Constant(F32({oc}), scale));
    t.AddArg(t.Constant(F32({oc}), shift));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<float> expected(conv.size());
    for (int64_t i = 0; i < shape[0]; ++i)
      for (int64_t k = 0; k < oc; ++k)
        for (int64_t p = 0; p < ohw; ++p) {
          const size_t at = (i * oc + k) * ohw + p;
          double v = std::max(0.0, conv[at]);
          if (ac.add_first) v += residual[at];
          v = v * scale[k] + shift[k];
          if (!ac.add_first) v += residual[at];
          expected[at] = static_cast<float>(v);
        }
    EXPECT_TRUE(AllClose(t.OutputF32(0), ToDouble(InLayout(expected, shape, ac.layout)), 1e-4,
                         1e-4))
        << oc << " channels, layout " << ac.layout;
  }
}

// The affine's operands come with its post-op, per output channel, as
// constants; anything else is refused before a kernel is built.
TEST(ConvolutionTest, ChannelAffineRejectsMissingOrMisshapenOperands) {
  auto prepare = [](bool post_op, int64_t scale_size, bool constant) {
    OpTester t("kiln.conv2d");
    t.AddArg(t.Input(F32({1, 8, 5, 5}), RandomFloats(200, 1)));
    t.AddArg(t.Constant(F32({8, 8, 1, 1}), RandomFloats(64, 2)));
    t.AddArg(NoneArg());
    t.AddArg(IntListArg({1, 1}));
    t.AddArg(IntListArg({0, 0}));
    t.AddArg(IntListArg({1, 1}));
    t.AddArg(IntArg(1));
    t.AddArg(NoneArg());
    Arg post_ops = IntListArg({});
    if (post_op) post_ops.list.push_back(StringArg("channel_affine"));
    t.AddArg(post_ops);
    t.AddArg(IntArg(0));
    t.AddArg(IntArg(0));
    if (scale_size > 0) {
      const auto v = RandomFloats(scale_size, 3);
      t.AddArg(constant ? t.Constant(F32({scale_size}), v) : t.Input(F32({scale_size}), v));
      t.AddArg(t.Constant(F32({8}), RandomFloats(8, 4)));
    }
    return t.Prepare();
  };
  EXPECT_TRUE(prepare(true, 8, true).ok()) << prepare(true, 8, true);
  EXPECT_TRUE(IsInvalidArgument(prepare(true, 0, true), "exactly one \"channel_affine\""));
  EXPECT_TRUE(IsInvalidArgument(prepare(false, 8, true), "exactly one \"channel_affine\""));
  EXPECT_TRUE(IsInvalidArgument(prepare(true, 6, true), "must be f32[8]"));
  EXPECT_EQ(prepare(true, 8, false).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime::testing
