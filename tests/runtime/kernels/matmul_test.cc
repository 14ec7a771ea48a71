// Tests aten.mm, aten.addmm and aten.linear against double-precision
// matrix products computed here, with constant (prepacked) and computed
// right-hand matrices.
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

// a[M,K] @ b, with b [K,N] or (b_is_nk) [N,K].
std::vector<double> ReferenceMm(int64_t m, int64_t k, int64_t n,
                                const std::vector<float>& a,
                                const std::vector<float>& b, bool b_is_nk) {
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        acc += static_cast<double>(a[i * k + p]) *
               (b_is_nk ? b[j * k + p] : b[p * n + j]);
      }
      out[i * n + j] = acc;
    }
  return out;
}

// Products of K values in [-1, 1]: float error grows ~sqrt(K) * 6e-8.
constexpr double kTol = 1e-4;

struct MmCase {
  int64_t m, k, n;
  bool constant_b;
};

class MmTest : public ::testing::TestWithParam<MmCase> {};

TEST_P(MmTest, MatchesReference) {
  const MmCase& c = GetParam();
  const auto a = RandomFloats(c.m * c.k, 1);
  const auto b = RandomFloats(c.k * c.n, 2);
  OpTester t("aten.mm.default");
  t.AddArg(t.Input(F32({c.m, c.k}), a));
  t.AddArg(c.constant_b ? t.Constant(F32({c.k, c.n}), b)
                        : t.Input(F32({c.k, c.n}), b));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({c.m, c.n}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), ReferenceMm(c.m, c.k, c.n, a, b, false),
                       kTol, kTol));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MmTest,
                         ::testing::Values(MmCase{1, 512, 1000, true},
                                           MmCase{1, 512, 1000, false},
                                           MmCase{7, 33, 5, false},
                                           MmCase{64, 128, 96, true},
                                           MmCase{3, 0, 4, false},  // K = 0
                                           MmCase{0, 5, 4, true}));

TEST(MmTest, MmRejectsInnerSizeMismatch) {
  OpTester t("aten.mm.default");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(t.Input(F32({4, 5}), RandomFloats(20, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "inner sizes differ"));
}

TEST(MmTest, MmRejectsNonMatrix) {
  OpTester t("aten.mm.default");
  t.AddArg(t.Input(F32({2, 3, 1}), RandomFloats(6, 1)));
  t.AddArg(t.Input(F32({3, 5}), RandomFloats(15, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "self must be a matrix"));
}

// ---- addmm ----

struct AddmmCase {
  int64_t m, k, n;
  std::vector<int64_t> self_shape;
  double beta, alpha;
  bool constant_b;
};

class AddmmTest : public ::testing::TestWithParam<AddmmCase> {};

TEST_P(AddmmTest, MatchesReference) {
  const AddmmCase& c = GetParam();
  const auto self = RandomFloats(NumElements(c.self_shape), 3);
  const auto a = RandomFloats(c.m * c.k, 4);
  const auto b = RandomFloats(c.k * c.n, 5);
  OpTester t("aten.addmm.default");
  t.AddArg(t.Input(F32(c.self_shape), self));
  t.AddArg(t.Input(F32({c.m, c.k}), a));
  t.AddArg(c.constant_b ? t.Constant(F32({c.k, c.n}), b)
                        : t.Input(F32({c.k, c.n}), b));
  if (c.beta != 1.0) t.AddKwarg("beta", FloatArg(c.beta));
  if (c.alpha != 1.0) t.AddKwarg("alpha", FloatArg(c.alpha));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({c.m, c.n}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected = ReferenceMm(c.m, c.k, c.n, a, b, false);
  // self broadcast to [M, N]: pad its shape to 2-D.
  std::vector<int64_t> s = c.self_shape;
  while (s.size() < 2) s.insert(s.begin(), 1);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      const double v = self[(s[0] == 1 ? 0 : i) * s[1] + (s[1] == 1 ? 0 : j)];
      double& e = expected[i * c.n + j];
      e = c.alpha * e + (c.beta == 0.0 ? 0.0 : c.beta * v);
    }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, kTol, kTol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AddmmTest,
    ::testing::Values(
        // nn.Linear lowered: bias [N], permuted (non-constant) weight.
        AddmmCase{4, 784, 128, {128}, 1.0, 1.0, false},
        AddmmCase{1, 512, 1000, {1000}, 1.0, 1.0, true},
        AddmmCase{5, 6, 7, {5, 7}, 1.0, 1.0, false},
        AddmmCase{5, 6, 7, {5, 1}, 1.0, 1.0, true},
        AddmmCase{5, 6, 7, {}, 1.0, 1.0, false},
        AddmmCase{5, 6, 7, {1, 7}, 0.5, 2.0, true},
        AddmmCase{5, 6, 7, {5, 7}, 0.0, 1.5, false},
        AddmmCase{3, 0, 4, {4}, 2.0, 1.0, false}));  // K = 0: beta * self

TEST(AddmmTest, BetaZeroIgnoresNaNInSelf) {
  std::vector<float> self(6, std::numeric_limits<float>::quiet_NaN());
  const auto a = RandomFloats(6, 1), b = RandomFloats(9, 2);
  OpTester t("aten.addmm.default");
  t.AddArg(t.Input(F32({2, 3}), self));
  t.AddArg(t.Input(F32({2, 3}), a));
  t.AddArg(t.Input(F32({3, 3}), b));
  t.AddKwarg("beta", IntArg(0));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(
      AllClose(t.OutputF32(0), ReferenceMm(2, 3, 3, a, b, false), kTol, kTol));
}

TEST(AddmmTest, AddmmRejectsSelfNotBroadcastable) {
  OpTester t("aten.addmm.default");
  t.AddArg(t.Input(F32({3}), RandomFloats(3, 1)));
  t.AddArg(t.Input(F32({2, 4}), RandomFloats(8, 2)));
  t.AddArg(t.Input(F32({4, 5}), RandomFloats(20, 3)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "does not broadcast"));
}

// ---- linear ----

struct LinearCase {
  std::vector<int64_t> input;
  int64_t n;
  bool bias, constant_weight;
};

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesReference) {
  const LinearCase& c = GetParam();
  const int64_t k = c.input.back();
  const int64_t m = NumElements(c.input) / k;
  const auto x = RandomFloats(NumElements(c.input), 6);
  const auto w = RandomFloats(c.n * k, 7);
  const auto b = RandomFloats(c.n, 8);
  OpTester t("aten.linear.default");
  t.AddArg(t.Input(F32(c.input), x));
  t.AddArg(c.constant_weight ? t.Constant(F32({c.n, k}), w)
                             : t.Input(F32({c.n, k}), w));
  if (c.bias) {
    t.AddArg(c.constant_weight ? t.Constant(F32({c.n}), b)
                               : t.Input(F32({c.n}), b));
  }
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  std::vector<int64_t> out_shape(c.input.begin(), c.input.end() - 1);
  out_shape.push_back(c.n);
  EXPECT_EQ(t.output_metas()[0], F32(out_shape));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected = ReferenceMm(m, k, c.n, x, w, true);
  if (c.bias) {
    for (int64_t i = 0; i < m * c.n; ++i) expected[i] += b[i % c.n];
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, kTol, kTol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Values(LinearCase{{8, 784}, 128, true, true},
                      LinearCase{{8, 128}, 10, true, false},
                      LinearCase{{2, 3, 16}, 5, true, true},  // batch dims
                      LinearCase{{16}, 5, true, true},        // rank 1
                      LinearCase{{4, 9}, 6, false, true},
                      LinearCase{{4, 9}, 6, false, false}));

TEST(LinearTest, LinearRejectsFeatureMismatch) {
  OpTester t("aten.linear.default");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(t.Constant(F32({4, 5}), RandomFloats(20, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "has 3 features"));
}

TEST(LinearTest, LinearRejectsBiasOfWrongSize) {
  OpTester t("aten.linear.default");
  t.AddArg(t.Input(F32({2, 3}), RandomFloats(6, 1)));
  t.AddArg(t.Constant(F32({4, 3}), RandomFloats(12, 2)));
  t.AddArg(t.Constant(F32({3}), RandomFloats(3, 3)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "bias must have shape [4]"));
}

TEST(LinearTest, LinearRejectsScalarInput) {
  OpTester t("aten.linear.default");
  t.AddArg(t.Input(F32({}), RandomFloats(1, 1)));
  t.AddArg(t.Constant(F32({4, 1}), RandomFloats(4, 2)));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "rank >= 1"));
}

}  // namespace
}  // namespace kiln::runtime::testing
