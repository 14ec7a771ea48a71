// The channels-last kernels (kiln.max_pool2d_nhwc, kiln.avg_pool2d_nhwc,
// kiln.adaptive_avg_pool2d_nhwc, kiln.batch_norm_nhwc) against their NCHW
// ATen counterparts, which pooling_test.cc and batch_norm_test.cc check
// against references: same input (permuted), same answer (permuted back).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

std::vector<float> ToNhwc(const std::vector<float>& x, const std::vector<int64_t>& s) {
  std::vector<float> y(x.size());
  const int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  for (int64_t b = 0; b < n; ++b)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t i = 0; i < h * w; ++i) y[(b * h * w + i) * c + k] = x[(b * c + k) * h * w + i];
  return y;
}

std::vector<int64_t> NhwcShape(const std::vector<int64_t>& s) { return {s[0], s[2], s[3], s[1]}; }

struct Case {
  std::string nchw_op, nhwc_op;
  std::vector<int64_t> input;
  std::vector<Arg> window;  // the arguments after the input
};

class PoolNhwcTest : public ::testing::TestWithParam<Case> {};

TEST_P(PoolNhwcTest, EqualsNchwKernel) {
  const Case& c = GetParam();
  auto x = RandomFloats(NumElements(c.input), 11);
  x[5] = std::numeric_limits<float>::quiet_NaN();  // NaN propagates the same way
  OpTester nchw(c.nchw_op);
  nchw.AddArg(nchw.Input(F32(c.input), x));
  for (const Arg& a : c.window) nchw.AddArg(a);
  ASSERT_TRUE(nchw.Prepare().ok()) << nchw.Prepare();
  ASSERT_TRUE(nchw.Run().ok());

  OpTester nhwc(c.nhwc_op);
  nhwc.AddArg(nhwc.Input(F32(NhwcShape(c.input)), ToNhwc(x, c.input)));
  for (const Arg& a : c.window) nhwc.AddArg(a);
  ASSERT_TRUE(nhwc.Prepare().ok()) << nhwc.Prepare();
  ASSERT_EQ(nhwc.output_metas().size(), 1u);
  const std::vector<int64_t> out = nchw.output_metas()[0].shape;
  EXPECT_EQ(nhwc.output_metas()[0], F32(NhwcShape(out)));
  ASSERT_TRUE(nhwc.Run().ok());
  const std::vector<float> expected = ToNhwc(nchw.OutputF32(0), out);
  const std::vector<float> actual = nhwc.OutputF32(0);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(actual[i])) << i;
    } else {
      // Same operations in the same order: bit-identical.
      EXPECT_EQ(actual[i], expected[i]) << i;
    }
  }
}

std::vector<Arg> Window(int64_t k, int64_t s, int64_t p, std::vector<Arg> rest = {}) {
  std::vector<Arg> a = {IntListArg({k, k}), IntListArg({s, s}), IntListArg({p, p})};
  a.insert(a.end(), rest.begin(), rest.end());
  return a;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolNhwcTest,
    ::testing::Values(
        // resnet stem, squeezenet (ceil_mode), dilation.
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {1, 64, 16, 16},
             Window(3, 2, 1, {IntListArg({1, 1}), BoolArg(false)})},
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {2, 5, 13, 13},
             Window(3, 2, 0, {IntListArg({1, 1}), BoolArg(true)})},
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {1, 3, 9, 9},
             Window(3, 2, 1, {IntListArg({2, 2}), BoolArg(false)})},
        // 8 and 16 channels (the blocked layout's images, vgg's 2x2 pools):
        // whole-window pixels four vectors at a time, a NaN row redone.
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {2, 8, 15, 15},
             Window(3, 2, 0, {IntListArg({1, 1}), BoolArg(true)})},
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {1, 16, 10, 10},
             Window(2, 2, 0, {IntListArg({1, 1}), BoolArg(false)})},
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {1, 24, 12, 12},
             Window(3, 1, 1, {IntListArg({1, 1}), BoolArg(false)})},
        // 44 channels: the kernel's 32-, 8- and 1-channel loops.
        Case{"aten.max_pool2d_with_indices.default", "kiln.max_pool2d_nhwc", {2, 44, 11, 11},
             Window(3, 2, 1, {IntListArg({1, 1}), BoolArg(true)})},
        // densenet transitions, inception (count_include_pad off), ceil.
        Case{"aten.avg_pool2d.default", "kiln.avg_pool2d_nhwc", {2, 6, 8, 8}, Window(2, 2, 0)},
        Case{"aten.avg_pool2d.default", "kiln.avg_pool2d_nhwc", {1, 4, 7, 7},
             Window(3, 1, 1, {BoolArg(false), BoolArg(false)})},
        Case{"aten.avg_pool2d.default", "kiln.avg_pool2d_nhwc", {1, 4, 7, 7},
             Window(3, 2, 1, {BoolArg(true), BoolArg(true)})},
        Case{"aten._adaptive_avg_pool2d.default", "kiln.adaptive_avg_pool2d_nhwc", {2, 8, 7, 7},
             {IntListArg({1, 1})}},
        Case{"aten._adaptive_avg_pool2d.default", "kiln.adaptive_avg_pool2d_nhwc", {1, 3, 10, 9},
             {IntListArg({4, 3})}}));

TEST(PoolNhwcTest, RejectsNonFourDimensionalInput) {
  OpTester t("kiln.max_pool2d_nhwc");
  t.AddArg(t.Input(F32({4, 4, 3}), RandomFloats(48, 1)));
  for (const Arg& a : Window(2, 2, 0, {IntListArg({1, 1}), BoolArg(false)})) t.AddArg(a);
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BatchNormNhwcTest, EqualsNchwKernel) {
  const std::vector<int64_t> shape = {2, 5, 3, 4};
  const auto x = RandomFloats(NumElements(shape), 3);
  const auto w = RandomFloats(5, 4), b = RandomFloats(5, 5), m = RandomFloats(5, 6);
  const auto v = RandomFloats(5, 7, 0.5f, 2.0f);
  OpTester nchw("aten._native_batch_norm_legit_no_training.default");
  nchw.AddArg(nchw.Input(F32(shape), x));
  for (const auto* p : {&w, &b, &m, &v}) nchw.AddArg(nchw.Constant(F32({5}), *p));
  nchw.AddArg(FloatArg(0.1));
  nchw.AddArg(FloatArg(1e-5));
  ASSERT_TRUE(nchw.Prepare().ok()) << nchw.Prepare();
  ASSERT_TRUE(nchw.Run().ok());

  OpTester nhwc("kiln.batch_norm_nhwc");
  nhwc.AddArg(nhwc.Input(F32(NhwcShape(shape)), ToNhwc(x, shape)));
  for (const auto* p : {&w, &b, &m, &v}) nhwc.AddArg(nhwc.Constant(F32({5}), *p));
  nhwc.AddArg(FloatArg(1e-5));
  ASSERT_TRUE(nhwc.Prepare().ok()) << nhwc.Prepare();
  ASSERT_EQ(nhwc.output_metas().size(), 1u);
  ASSERT_TRUE(nhwc.Run().ok());
  EXPECT_EQ(nhwc.OutputF32(0), ToNhwc(nchw.OutputF32(0), shape));
}

// post_ops (passes/fuse_batch_norm_activation.cc): the activation applied
// to the normalized values, exactly as the separate relu would.
TEST(BatchNormNhwcTest, PostOpsActivateTheResult) {
  const std::vector<int64_t> shape = {1, 3, 4, 24};
  const auto x = RandomFloats(NumElements(shape), 8);
  const auto w = RandomFloats(24, 4), b = RandomFloats(24, 5), m = RandomFloats(24, 6);
  const auto v = RandomFloats(24, 7, 0.5f, 2.0f);
  auto run = [&](std::vector<Arg> post_ops, std::vector<float>* out) {
    OpTester t("kiln.batch_norm_nhwc");
    t.AddArg(t.Input(F32(shape), x));
    for (const auto* p : {&w, &b, &m, &v}) t.AddArg(t.Constant(F32({24}), *p));
    t.AddArg(FloatArg(1e-5));
    if (!post_ops.empty()) t.AddArg(ListArg(std::move(post_ops)));
    absl::Status s = t.Prepare();
    if (s.ok()) s = t.Run();
    if (s.ok()) *out = t.OutputF32(0);
    return s;
  };
  std::vector<float> plain, relu;
  ASSERT_TRUE(run({}, &plain).ok());
  ASSERT_TRUE(run({StringArg("relu")}, &relu).ok());
  ASSERT_EQ(plain.size(), relu.size());
  int negative = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    negative += plain[i] < 0;
    EXPECT_EQ(relu[i], std::max(plain[i], 0.0f)) << i;
  }
  EXPECT_GT(negative, 0);
  // A residual add reads a tensor: not a batch norm post-op.
  std::vector<float> unused;
  EXPECT_FALSE(run({StringArg("add")}, &unused).ok());
}

}  // namespace
}  // namespace kiln::runtime::testing
