// Tests aten.mm, aten.addmm and aten.linear against double-precision
// matrix products computed here, with constant (prepacked) and computed
// right-hand matrices.
#include <cmath>
#include <string>

#include "runtime/kernels/onednn_util.h"
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
        AddmmCase{40, 32, 72, {72}, 1.0, 1.0, true},  // weight kept [N, K] (no brgemm)
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
                      LinearCase{{4, 9}, 6, false, false},
                      // 16+ rows, output at least as wide as the input: the
                      // weight stays [N, K] on CPUs without brgemm.
                      LinearCase{{2, 24, 48}, 96, true, true},
                      LinearCase{{32, 64}, 64, true, false}));

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

// ---- precision bf16 ----

// max|actual - expected| / max|expected|.
double RelativeError(const std::vector<float>& actual, const std::vector<double>& expected) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    err = std::max(err, std::abs(actual[i] - expected[i]));
    scale = std::max(scale, std::abs(expected[i]));
  }
  return err / scale;
}

CompileOptions Bf16() {
  CompileOptions o;
  o.precision = Precision::kBf16;
  return o;
}

// bf16 keeps 8 significant bits: products of K values in [-1, 1] come out
// about 1e-3 off relative to the result's scale; f32 is ~1e-7 off.
constexpr double kBf16RelTol = 1e-2;
constexpr double kF32RelTol = 1e-5;

struct Bf16Case {
  const char* name;
  bool constant_b;
  bool linear;  // aten.linear with bias, else aten.mm
};

class MatmulBf16Test : public ::testing::TestWithParam<Bf16Case> {};

TEST_P(MatmulBf16Test, Bf16DiffersFromF32ByBf16SizedError) {
  if (ComputeType(Bf16()) != dnnl::memory::data_type::bf16) {
    GTEST_SKIP() << "this CPU has no native bf16 dot products; bf16 runs in f32";
  }
  const Bf16Case& c = GetParam();
  const int64_t m = 16, k = 256, n = 64;
  const auto a = RandomFloats(m * k, 11);
  const auto b = RandomFloats(k * n, 12);  // [K, N] for mm, [N, K] for linear
  const auto bias = RandomFloats(n, 13);
  std::vector<double> expected = ReferenceMm(m, k, n, a, b, /*b_is_nk=*/c.linear);
  if (c.linear) {
    for (int64_t i = 0; i < m * n; ++i) expected[i] += bias[i % n];
  }
  auto run = [&](const CompileOptions& options) -> std::vector<float> {
    OpTester t(c.linear ? "aten.linear.default" : "aten.mm.default");
    t.SetOptions(options);
    const TensorMeta b_meta = c.linear ? F32({n, k}) : F32({k, n});
    t.AddArg(t.Input(F32({m, k}), a));
    t.AddArg(c.constant_b ? t.Constant(b_meta, b) : t.Input(b_meta, b));
    if (c.linear) t.AddArg(t.Constant(F32({n}), bias));
    absl::Status prepared = t.Prepare();
    EXPECT_TRUE(prepared.ok()) << prepared;
    EXPECT_TRUE(t.Run().ok());
    return t.OutputF32(0);
  };
  const std::vector<float> f32 = run(CompileOptions());
  const std::vector<float> bf16 = run(Bf16());
  EXPECT_LT(RelativeError(f32, expected), kF32RelTol);
  const double bf16_error = RelativeError(bf16, expected);
  EXPECT_LT(bf16_error, kBf16RelTol);
  // Not silently f32: the rounding of the operands must show.
  EXPECT_GT(bf16_error, 10 * kF32RelTol);
  EXPECT_NE(f32, bf16);
}

INSTANTIATE_TEST_SUITE_P(
    Operands, MatmulBf16Test,
    ::testing::Values(Bf16Case{"mm_constant_b", true, false},
                      Bf16Case{"mm_computed_b", false, false},
                      Bf16Case{"linear_constant_weight", true, true},
                      Bf16Case{"linear_computed_weight", false, true}),
    [](const ::testing::TestParamInfo<Bf16Case>& info) { return info.param.name; });

TEST(MatmulBf16Test, F32OptionsGiveTheDefaultKernel) {
  // The options' default is f32: bit-identical to a prepare without options.
  const auto a = RandomFloats(8 * 32, 21);
  const auto b = RandomFloats(32 * 8, 22);
  std::vector<float> outs[2];
  for (int i = 0; i < 2; ++i) {
    OpTester t("aten.mm.default");
    if (i == 1) t.SetOptions(CompileOptions());
    t.AddArg(t.Input(F32({8, 32}), a));
    t.AddArg(t.Constant(F32({32, 8}), b));
    ASSERT_TRUE(t.Prepare().ok());
    ASSERT_TRUE(t.Run().ok());
    outs[i] = t.OutputF32(0);
  }
  EXPECT_EQ(outs[0], outs[1]);
}

// ---- kiln.addmm: fused activations, transposed constant weights ----
//
// A constant weight takes the panel kernels (kernels/skinny_matmul.h) with
// few rows, and on AVX2 with many; otherwise, or with a computed weight,
// oneDNN.
// Both must give the product, the addend and the activations in order.

double ApplyReference(const std::string& op, double x) {
  if (op == "relu") return std::max(x, 0.0);
  if (op == "sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (op == "silu") return x / (1.0 + std::exp(-x));
  if (op == "gelu_erf") return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  if (op == "gelu_tanh") {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  if (op == "hardswish") return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
  if (op == "hardsigmoid") return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
  if (op == "clip:-0.5:0.25") return std::min(std::max(x, -0.5), 0.25);
  ADD_FAILURE() << "no reference for " << op;
  return x;
}

struct FusedAddmmCase {
  const char* name;
  int64_t m, k, n;
  std::vector<int64_t> self_shape;  // empty list and has_self false: no self
  bool has_self;
  bool transposed;  // mat2 given as [N, K]
  bool constant_b;
  std::vector<std::string> post_ops;
};

class FusedAddmmTest : public ::testing::TestWithParam<FusedAddmmCase> {};

TEST_P(FusedAddmmTest, MatchesReference) {
  const FusedAddmmCase& c = GetParam();
  const auto self = RandomFloats(std::max<int64_t>(NumElements(c.self_shape), 1), 31);
  const auto a = RandomFloats(c.m * c.k, 32);
  const auto b = RandomFloats(c.k * c.n, 33);
  const TensorMeta b_meta = c.transposed ? F32({c.n, c.k}) : F32({c.k, c.n});
  OpTester t("kiln.addmm");
  t.AddArg(c.has_self ? t.Input(F32(c.self_shape), self) : NoneArg());
  t.AddArg(t.Input(F32({c.m, c.k}), a));
  t.AddArg(c.constant_b ? t.Constant(b_meta, b) : t.Input(b_meta, b));
  std::vector<Arg> ops;
  for (const std::string& op : c.post_ops) ops.push_back(StringArg(op));
  t.AddArg(ListArg(ops));
  t.AddArg(BoolArg(c.transposed));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({c.m, c.n}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected = ReferenceMm(c.m, c.k, c.n, a, b, c.transposed);
  std::vector<int64_t> s = c.self_shape;
  while (s.size() < 2) s.insert(s.begin(), 1);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double& e = expected[i * c.n + j];
      if (c.has_self) e += self[(s[0] == 1 ? 0 : i) * s[1] + (s[1] == 1 ? 0 : j)];
      for (const std::string& op : c.post_ops) e = ApplyReference(op, e);
    }
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, kTol, kTol));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedAddmmTest,
    ::testing::Values(
        // One row, a classifier head: bias, K and N not multiples of 16.
        FusedAddmmCase{"row_bias_relu", 1, 300, 1000, {1000}, true, true, true, {"relu"}},
        FusedAddmmCase{"row_no_self", 1, 512, 45, {}, false, false, true, {}},
        FusedAddmmCase{"two_rows_full_self", 2, 37, 130, {2, 130}, true, true, true,
                       {"gelu_erf"}},
        FusedAddmmCase{"two_rows_column_self", 2, 64, 80, {2, 1}, true, false, true,
                       {"silu", "clip:-0.5:0.25"}},
        FusedAddmmCase{"row_scalar_self", 1, 129, 64, {}, true, true, true,
                       {"hardswish"}},
        FusedAddmmCase{"row_sigmoid_family", 1, 96, 100, {100}, true, true, true,
                       {"sigmoid", "hardsigmoid", "gelu_tanh"}},
        // Up to 8 rows: AVX-512's row groups of 6, 4, 2, 1; AVX2's passes
        // that prefetch the next chunk (K over several 64-row chunks, N
        // over several panels).
        FusedAddmmCase{"five_rows", 5, 70, 40, {40}, true, true, true, {"relu"}},
        FusedAddmmCase{"eight_rows", 8, 33, 100, {8, 100}, true, false, true, {}},
        FusedAddmmCase{"eight_rows_chunks_and_panels", 8, 200, 150, {150}, true, true, true,
                       {"silu"}},
        FusedAddmmCase{"three_rows_chunks_and_panels", 3, 129, 130, {3, 1}, true, false, true,
                       {}},
        // More rows: on AVX2 the many-row panel loops (tiles of 6 rows, a
        // partial last tile and strip, K over several 256-row chunks, rows
        // in several blocks), on AVX-512 oneDNN; a computed weight: oneDNN.
        FusedAddmmCase{"rows_24", 24, 40, 72, {72}, true, true, true, {"relu"}},
        FusedAddmmCase{"rows_13_plain_weight", 13, 300, 70, {13, 1}, true, false, true,
                       {"gelu_erf"}},
        FusedAddmmCase{"rows_500_three_blocks", 500, 520, 200, {500, 200}, true, true, true,
                       {"silu"}},
        // 11 panels x 3 blocks, the last panel with a partial strip.
        FusedAddmmCase{"rows_500_many_panels", 500, 300, 700, {700}, true, true, true,
                       {"relu"}},
        FusedAddmmCase{"computed_transposed", 2, 40, 72, {72}, true, true, false,
                       {"gelu_erf"}}),
    [](const ::testing::TestParamInfo<FusedAddmmCase>& info) { return info.param.name; });

TEST(FusedAddmmTest, TransposedRejectsInnerSizeMismatch) {
  OpTester t("kiln.addmm");
  t.AddArg(NoneArg());
  t.AddArg(t.Input(F32({1, 8}), RandomFloats(8, 1)));
  t.AddArg(t.Constant(F32({8, 5}), RandomFloats(40, 2)));  // [N, K] with K = 5
  t.AddArg(ListArg({}));
  t.AddArg(BoolArg(true));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "transposed: inner sizes differ"));
}

}  // namespace
}  // namespace kiln::runtime::testing
