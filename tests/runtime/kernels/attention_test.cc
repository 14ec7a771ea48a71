// Tests aten._scaled_dot_product_flash_attention_for_cpu against a
// double-precision reference of PyTorch's math attention: masks (f32 and
// bool, broadcast), causal (top-left), grouped-query heads, explicit
// scale, fully masked rows, and refusals.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct Shape {
  int64_t b, hq, hkv, l, s, e;
};

// mask(b, h, i, j): additive value (or -inf for masked out).
template <typename MaskFn>
void ReferenceAttention(const Shape& sh, const std::vector<float>& q,
                        const std::vector<float>& k,
                        const std::vector<float>& v, double scale, bool causal,
                        MaskFn mask, std::vector<double>* out,
                        std::vector<double>* lse) {
  out->assign(sh.b * sh.hq * sh.l * sh.e, 0.0);
  lse->assign(sh.b * sh.hq * sh.l, 0.0);
  const int64_t group = sh.hq / sh.hkv;
  for (int64_t b = 0; b < sh.b; ++b)
    for (int64_t h = 0; h < sh.hq; ++h)
      for (int64_t i = 0; i < sh.l; ++i) {
        const int64_t kvh = b * sh.hkv + h / group;
        const int64_t qi = ((b * sh.hq + h) * sh.l + i);
        std::vector<double> sc(sh.s);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < sh.s; ++j) {
          double d = 0;
          for (int64_t c = 0; c < sh.e; ++c) {
            d += static_cast<double>(q[qi * sh.e + c]) * k[(kvh * sh.s + j) * sh.e + c];
          }
          sc[j] = d * scale + mask(b, h, i, j);
          if (causal && j > i) sc[j] = -std::numeric_limits<double>::infinity();
          mx = std::max(mx, sc[j]);
        }
        if (std::isinf(mx)) continue;  // fully masked: zeros, lse 0
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < sh.s; ++j)
          for (int64_t c = 0; c < sh.e; ++c)
            (*out)[qi * sh.e + c] += sc[j] / sum * v[(kvh * sh.s + j) * sh.e + c];
        (*lse)[qi] = mx + std::log(sum);
      }
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs MakeInputs(const Shape& sh, uint32_t seed) {
  return {RandomFloats(sh.b * sh.hq * sh.l * sh.e, seed, -2, 2),
          RandomFloats(sh.b * sh.hkv * sh.s * sh.e, seed + 1, -2, 2),
          RandomFloats(sh.b * sh.hkv * sh.s * sh.e, seed + 2)};
}

void AddQkv(OpTester& t, const Shape& sh, const Inputs& in) {
  t.AddArg(t.Input(F32({sh.b, sh.hq, sh.l, sh.e}), in.q));
  t.AddArg(t.Input(F32({sh.b, sh.hkv, sh.s, sh.e}), in.k));
  t.AddArg(t.Input(F32({sh.b, sh.hkv, sh.s, sh.e}), in.v));
}

// Every case with K^T and V in strips (KILN_ATTENTION_STRIPS unset) and in
// their plain layouts (=0).
class AttentionTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      unsetenv("KILN_ATTENTION_STRIPS");
    } else {
      setenv("KILN_ATTENTION_STRIPS", "0", 1);
    }
  }
  void TearDown() override { unsetenv("KILN_ATTENTION_STRIPS"); }
};

INSTANTIATE_TEST_SUITE_P(Layouts, AttentionTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Strips") : std::string("Plain");
                         });

TEST_P(AttentionTest, PaddingMaskBroadcastOverHeadsAndRows) {
  // BERT: mask [B, 1, L, S] of 0 / -inf, last keys padded per batch.
  const Shape sh{2, 3, 3, 5, 5, 32};
  const Inputs in = MakeInputs(sh, 1);
  std::vector<float> mask(sh.b * sh.l * sh.s, 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < sh.l; ++i) {
    mask[(0 * sh.l + i) * sh.s + 4] = -inf;
    mask[(1 * sh.l + i) * sh.s + 3] = -inf;
    mask[(1 * sh.l + i) * sh.s + 4] = -inf;
  }
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddKwarg("attn_mask", t.Input(F32({sh.b, 1, sh.l, sh.s}), mask));
  t.AddKwarg("scale", FloatArg(0.125));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 2u);
  EXPECT_EQ(t.output_metas()[0], F32({sh.b, sh.hq, sh.l, sh.e}));
  EXPECT_EQ(t.output_metas()[1], F32({sh.b, sh.hq, sh.l}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 0.125, false,
                     [&](int64_t b, int64_t, int64_t i, int64_t j) {
                       return static_cast<double>(mask[(b * sh.l + i) * sh.s + j]);
                     },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(1), lse, 1e-5, 1e-6));
}

TEST_P(AttentionTest, CausalGroupedQueryHeadsWithDefaultScale) {
  // Llama prefill: 8 query heads over 4 key/value heads, is_causal.
  const Shape sh{1, 8, 4, 37, 37, 48};
  const Inputs in = MakeInputs(sh, 4);
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddArg(FloatArg(0.0));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 1.0 / std::sqrt(48.0), true,
                     [](int64_t, int64_t, int64_t, int64_t) { return 0.0; },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
}

TEST_P(AttentionTest, CausalIsTopLeftWhenQueriesAreFewerThanKeys) {
  const Shape sh{1, 2, 2, 3, 6, 4};
  const Inputs in = MakeInputs(sh, 7);
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddArg(FloatArg(0.0));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 0.5, true,
                     [](int64_t, int64_t, int64_t, int64_t) { return 0.0; },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
}

TEST_P(AttentionTest, DecodeStepOneQueryManyKeys) {
  const Shape sh{3, 4, 2, 1, 70, 32};
  const Inputs in = MakeInputs(sh, 9);
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 1.0 / std::sqrt(32.0), false,
                     [](int64_t, int64_t, int64_t, int64_t) { return 0.0; },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
}

TEST_P(AttentionTest, BoolMaskAndFullyMaskedRowGivesZeros) {
  const Shape sh{1, 2, 2, 3, 4, 4};
  const Inputs in = MakeInputs(sh, 12);
  // [L, S]; row 1 masks every key.
  const std::vector<int> keep = {1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0};
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddKwarg("attn_mask", BoolInput(t, {sh.l, sh.s}, keep));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 0.5, false,
                     [&](int64_t, int64_t, int64_t i, int64_t j) {
                       return keep[i * sh.s + j]
                                  ? 0.0
                                  : -std::numeric_limits<double>::infinity();
                     },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(1), lse, 1e-5, 1e-6));
}

TEST_P(AttentionTest, ManyQueryBlocksCausalWithLogSumExp) {
  // More query rows than one block holds, head sizes that are no multiple
  // of the kernels' 16-float tiles.
  const Shape sh{1, 2, 2, 200, 300, 36};
  const Inputs in = MakeInputs(sh, 21);
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddArg(FloatArg(0.0));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 1.0 / std::sqrt(36.0), true,
                     [](int64_t, int64_t, int64_t, int64_t) { return 0.0; }, &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(1), lse, 1e-5, 1e-6));
}

TEST_P(AttentionTest, LongKeysWithPaddingMaskOverSeveralBlocks) {
  const Shape sh{2, 3, 3, 50, 1100, 40};
  const Inputs in = MakeInputs(sh, 23);
  std::vector<float> mask(sh.b * sh.s);
  for (int64_t b = 0; b < sh.b; ++b)
    for (int64_t j = 0; j < sh.s; ++j) mask[b * sh.s + j] = j < 900 + 100 * b ? 0.0f : -1e4f;
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddKwarg("attn_mask", t.Input(F32({sh.b, 1, 1, sh.s}), mask));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 1.0 / std::sqrt(40.0), false,
                     [&](int64_t b, int64_t, int64_t, int64_t j) { return mask[b * sh.s + j]; },
                     &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(1), lse, 1e-5, 1e-6));
}

TEST_P(AttentionTest, HeadsOfManyStripsAndPartialOnes) {
  // E and Ev of 40: two whole strips of 16 and a partial one; 70 keys:
  // four whole strips and a partial one, causal so later blocks see more.
  const Shape sh{1, 2, 1, 150, 70, 40};
  const Inputs in = MakeInputs(sh, 25);
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, in);
  t.AddArg(FloatArg(0.0));
  t.AddArg(BoolArg(true));
  t.AddKwarg("scale", FloatArg(0.05));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  std::vector<double> want, lse;
  ReferenceAttention(sh, in.q, in.k, in.v, 0.05, true,
                     [](int64_t, int64_t, int64_t, int64_t) { return 0.0; }, &want, &lse);
  EXPECT_TRUE(AllClose(out.As<float>(0), want, 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(out.As<float>(1), lse, 1e-5, 1e-6));
}

TEST_P(AttentionTest, RejectsDropout) {
  const Shape sh{1, 1, 1, 2, 2, 4};
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, MakeInputs(sh, 1));
  t.AddArg(FloatArg(0.1));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kUnimplemented);
}

TEST_P(AttentionTest, RejectsHeadsThatDoNotGroup) {
  const Shape sh{1, 3, 2, 2, 2, 4};
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, MakeInputs(sh, 1));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "multiple of key/value heads"));
}

TEST_P(AttentionTest, RejectsMaskThatDoesNotBroadcast) {
  const Shape sh{1, 2, 2, 3, 4, 4};
  OpTester t("aten._scaled_dot_product_flash_attention_for_cpu.default");
  AddQkv(t, sh, MakeInputs(sh, 1));
  t.AddKwarg("attn_mask", t.Input(F32({3, 3}), RandomFloats(9, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "does not broadcast"));
}

}  // namespace
}  // namespace kiln::runtime::testing
