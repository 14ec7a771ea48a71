// The reductions of reduce_general.cc (and f32 sum of reduce.cc) against
// references the test computes: any set of dims, keepdim, integer and bool
// inputs, NaN handling and first-index ties as in ATen.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

// Reference reduction of x (shape [2, 3, 4]) over `dims`, with `fold`
// over the reduced elements in row-major order; the result is in kept
// dims' row-major order.
template <typename T, typename F>
std::vector<double> Reduce234(const std::vector<T>& x, std::vector<int> dims, F fold) {
  const std::vector<int64_t> shape = {2, 3, 4};
  std::vector<bool> red(3, false);
  for (int d : dims) red[d] = true;
  std::vector<int64_t> out_shape;
  for (int d = 0; d < 3; ++d) out_shape.push_back(red[d] ? 1 : shape[d]);
  std::vector<std::vector<double>> groups(NumElements(out_shape));
  for (int64_t i = 0; i < 24; ++i) {
    std::vector<int64_t> idx = Unravel(i, shape);
    for (int d = 0; d < 3; ++d) {
      if (red[d]) idx[d] = 0;
    }
    groups[Ravel(idx, out_shape)].push_back(static_cast<double>(x[i]));
  }
  std::vector<double> out;
  for (const auto& g : groups) out.push_back(fold(g));
  return out;
}

double Sum(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}
double Prod(const std::vector<double>& g) {
  double s = 1;
  for (double v : g) s *= v;
  return s;
}
double Var(const std::vector<double>& g) {
  const double mean = Sum(g) / g.size();
  double s = 0;
  for (double v : g) s += (v - mean) * (v - mean);
  return s / (g.size() - 1);
}

TEST(ReduceGeneral, SumOverDimSetsOfF32I64AndBool) {
  const auto x = RandomFloats(24, 5, -3, 3);
  std::vector<int64_t> xi;
  std::vector<int> xb;
  for (float v : x) {
    xi.push_back(static_cast<int64_t>(std::lround(v * 1000)));
    xb.push_back(v > 0);
  }
  for (std::vector<int> dims : {std::vector<int>{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
    {
      OpTester t("aten.sum.dim_IntList");
      t.AddArg(t.Input(F32({2, 3, 4}), x));
      t.AddArg(IntListArg({dims.begin(), dims.end()}));
      t.AddArg(BoolArg(true));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      ASSERT_TRUE(t.Run().ok());
      EXPECT_TRUE(AllClose(t.OutputF32(0), Reduce234(x, dims, Sum), 1e-6, 1e-6));
    }
    {
      OpTester t("aten.sum.dim_IntList");
      t.AddArg(I64Input(t, {2, 3, 4}, xi));
      t.AddArg(IntListArg({dims.begin(), dims.end()}));
      t.AddArg(BoolArg(true));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      EXPECT_EQ(t.output_metas()[0].dtype, DType::kI64);
      ASSERT_TRUE(t.Run().ok());
      std::vector<int64_t> want;
      for (double v : Reduce234(xi, dims, Sum)) want.push_back(static_cast<int64_t>(v));
      EXPECT_EQ(t.OutputI64(0), want);
    }
    {
      OpTester t("aten.sum.dim_IntList");
      t.AddArg(BoolInput(t, {2, 3, 4}, xb));
      t.AddArg(IntListArg({dims.begin(), dims.end()}));
      t.AddArg(BoolArg(true));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      EXPECT_EQ(t.output_metas()[0].dtype, DType::kI64);
      ASSERT_TRUE(t.Run().ok());
      std::vector<int64_t> want;
      for (double v : Reduce234(xb, dims, Sum)) want.push_back(static_cast<int64_t>(v));
      EXPECT_EQ(t.OutputI64(0), want);
    }
  }
}

TEST(ReduceGeneral, SumWithoutDimsAndKeepdimFalse) {
  const auto x = RandomFloats(24, 6, -3, 3);
  OpTester t("aten.sum.dim_IntList");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(NoneArg());
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), Reduce234(x, {0, 1, 2}, Sum), 1e-6, 1e-6));
}

TEST(ReduceGeneral, ProdOfOneDimAndOfEverything) {
  const auto x = RandomFloats(24, 7, 0.5, 1.5);
  OpTester t("aten.prod.dim_int");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntArg(-2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), Reduce234(x, {1}, Prod), 1e-6, 0));

  OpTester all("aten.prod.default");
  all.AddArg(I64Input(all, {4}, {3, -2, 5, 7}));
  ASSERT_TRUE(all.Prepare().ok()) << all.Prepare();
  ASSERT_TRUE(all.Run().ok());
  EXPECT_EQ(all.OutputI64(0), std::vector<int64_t>{-210});
}

TEST(ReduceGeneral, AmaxAminOverDimsWithNaNWinning) {
  auto x = RandomFloats(24, 8, -3, 3);
  for (std::vector<int> dims : {std::vector<int>{2}, {0, 1}}) {
    for (const char* op : {"aten.amax.default", "aten.amin.default"}) {
      const bool is_max = std::string(op) == "aten.amax.default";
      OpTester t(op);
      t.AddArg(t.Input(F32({2, 3, 4}), x));
      t.AddArg(IntListArg({dims.begin(), dims.end()}));
      t.AddArg(BoolArg(true));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      ASSERT_TRUE(t.Run().ok());
      const auto want = Reduce234(x, dims, [&](const std::vector<double>& g) {
        double m = g[0];
        for (double v : g) m = is_max ? std::max(m, v) : std::min(m, v);
        return m;
      });
      EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0)) << op;
    }
  }
  x[5] = std::numeric_limits<float>::quiet_NaN();  // in row [0, 1, :]
  OpTester t("aten.amax.default");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntListArg({2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> out = t.OutputF32(0);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_FALSE(std::isnan(out[0]));
}

TEST(ReduceGeneral, MaxMinOfEverything) {
  OpTester t("aten.max.default");
  t.AddArg(I64Input(t, {2, 2}, {4, -9, 12, 3}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputI64(0), std::vector<int64_t>{12});
  OpTester m("aten.min.default");
  m.AddArg(m.Input(F32({3}), {2.f, -1.f, 5.f}));
  ASSERT_TRUE(m.Prepare().ok()) << m.Prepare();
  ASSERT_TRUE(m.Run().ok());
  EXPECT_TRUE(AllClose(m.OutputF32(0), {-1.0}, 0, 0));
  OpTester e("aten.max.default");
  e.AddArg(e.Input(F32({0}), {}));
  EXPECT_TRUE(IsInvalidArgument(e.Prepare(), "no identity"));
}

TEST(ReduceGeneral, MaxDimGivesValuesAndFirstIndices) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.max.dim");
  t.AddArg(t.Input(F32({3, 4}), {1, 5, 5, 2, /**/ 7, nan, 9, nan, /**/ -1, -3, -1, -2}));
  t.AddArg(IntArg(1));
  t.AddArg(BoolArg(true));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3, 1}));
  EXPECT_EQ(t.output_metas()[1], I64({3, 1}));
  ASSERT_TRUE(t.Run().ok());
  const std::vector<float> values = t.OutputF32(0);
  EXPECT_TRUE(AllClose({values[0], values[2]}, {5, -1}, 0, 0));
  EXPECT_TRUE(std::isnan(values[1]));
  EXPECT_EQ(t.OutputI64(1), (std::vector<int64_t>{1, 1, 0}));

  OpTester m("aten.min.dim");
  m.AddArg(I64Input(m, {2, 3}, {4, 1, 1, /**/ 0, 8, -2}));
  m.AddArg(IntArg(0));
  ASSERT_TRUE(m.Prepare().ok()) << m.Prepare();
  ASSERT_TRUE(m.Run().ok());
  EXPECT_EQ(m.OutputI64(0), (std::vector<int64_t>{0, 1, -2}));
  EXPECT_EQ(m.OutputI64(1), (std::vector<int64_t>{1, 0, 1}));
}

TEST(ReduceGeneral, ArgmaxArgminFlattenWithoutDim) {
  const auto x = RandomFloats(24, 9, -3, 3);
  OpTester t("aten.argmax.default");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], I64({}));
  ASSERT_TRUE(t.Run().ok());
  int64_t best = 0;
  for (int64_t i = 1; i < 24; ++i) {
    if (x[i] > x[best]) best = i;
  }
  EXPECT_EQ(t.OutputI64(0), std::vector<int64_t>{best});

  OpTester d("aten.argmin.default");
  d.AddArg(d.Input(F32({2, 3, 4}), x));
  d.AddArg(IntArg(1));
  d.AddArg(BoolArg(false));
  ASSERT_TRUE(d.Prepare().ok()) << d.Prepare();
  EXPECT_EQ(d.output_metas()[0], I64({2, 4}));
  ASSERT_TRUE(d.Run().ok());
  std::vector<double> want = Reduce234(x, {1}, [](const std::vector<double>& g) {
    int k = 0;
    for (int i = 1; i < static_cast<int>(g.size()); ++i) {
      if (g[i] < g[k]) k = i;
    }
    return static_cast<double>(k);
  });
  std::vector<int64_t> want_i(want.begin(), want.end());
  EXPECT_EQ(d.OutputI64(0), want_i);
}

TEST(ReduceGeneral, VarWithCorrection) {
  const auto x = RandomFloats(24, 10, -3, 3);
  for (std::vector<int> dims : {std::vector<int>{2}, {0, 2}}) {
    OpTester t("aten.var.correction");
    t.AddArg(t.Input(F32({2, 3, 4}), x));
    t.AddArg(IntListArg({dims.begin(), dims.end()}));
    t.AddKwarg("correction", IntArg(1));
    t.AddKwarg("keepdim", BoolArg(true));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    EXPECT_TRUE(AllClose(t.OutputF32(0), Reduce234(x, dims, Var), 1e-5, 1e-6));
  }
  // correction 0 over everything: the population variance.
  OpTester p("aten.var.correction");
  p.AddArg(p.Input(F32({4}), {1, 2, 3, 4}));
  p.AddArg(NoneArg());
  p.AddKwarg("correction", IntArg(0));
  ASSERT_TRUE(p.Prepare().ok()) << p.Prepare();
  ASSERT_TRUE(p.Run().ok());
  EXPECT_TRUE(AllClose(p.OutputF32(0), {1.25}, 1e-6, 0));
}

TEST(ReduceGeneral, VarMeanGivesBoth) {
  const auto x = RandomFloats(24, 11, -3, 3);
  OpTester t("aten.var_mean.correction");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntListArg({1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4}));
  EXPECT_EQ(t.output_metas()[1], F32({2, 4}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), Reduce234(x, {1}, Var), 1e-5, 1e-6));
  EXPECT_TRUE(AllClose(t.OutputF32(1), Reduce234(x, {1}, [](const std::vector<double>& g) {
                         return Sum(g) / g.size();
                       }), 1e-6, 1e-6));
}

TEST(ReduceGeneral, AnyOfEverythingAndOfDims) {
  OpTester t("aten.any.default");
  t.AddArg(t.Input(F32({3}), {0, 0, std::numeric_limits<float>::quiet_NaN()}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputBool(0), std::vector<uint8_t>{1});
  OpTester d("aten.any.dims");
  d.AddArg(I64Input(d, {2, 3}, {0, 0, 0, 0, 5, 0}));
  d.AddArg(IntListArg({1}));
  ASSERT_TRUE(d.Prepare().ok()) << d.Prepare();
  ASSERT_TRUE(d.Run().ok());
  EXPECT_EQ(d.OutputBool(0), (std::vector<uint8_t>{0, 1}));
}

TEST(ReduceGeneral, RejectsARepeatedDim) {
  OpTester t("aten.amax.default");
  t.AddArg(t.Input(F32({2, 2}), {1, 2, 3, 4}));
  t.AddArg(IntListArg({1, -1}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "appears twice"));
}

}  // namespace
}  // namespace kiln::runtime::testing
