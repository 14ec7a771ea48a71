// scatter.cc: scatter, scatter_add, scatter_reduce (every reduction, with
// and without self) and index_put (assign and accumulate), against
// references the test computes with plain loops, with repeated indices,
// and out-of-range indices failing the run.
#include <cmath>
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

// self [4, 5], index/src [3, 5] along dim 0 with repeats.
const std::vector<int64_t> kIndex = {0, 3, 3, 1, 0, 3, 3, 0, 1, 0, 0, 2, 3, 1, 0};

std::vector<double> ReduceRef(const std::vector<float>& self, const std::vector<float>& src,
                              const std::string& reduce, bool include_self) {
  std::vector<double> out(self.begin(), self.end());
  std::vector<int> count(out.size(), 0);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      const int64_t o = kIndex[i * 5 + j] * 5 + j;
      const double v = src[i * 5 + j];
      if (count[o] == 0 && !include_self) {
        out[o] = v;
      } else if (reduce == "sum" || reduce == "mean") {
        out[o] += v;
      } else if (reduce == "prod") {
        out[o] *= v;
      } else if (reduce == "amax") {
        out[o] = std::max(out[o], v);
      } else if (reduce == "amin") {
        out[o] = std::min(out[o], v);
      } else {
        out[o] = v;  // assignment: the last wins
      }
      ++count[o];
    }
  }
  if (reduce == "mean") {
    for (size_t o = 0; o < out.size(); ++o) {
      if (count[o] > 0) out[o] /= count[o] + (include_self ? 1 : 0);
    }
  }
  return out;
}

TEST(ScatterTest, EveryReductionWithAndWithoutSelf) {
  const auto self = RandomFloats(20, 61, -2, 2), src = RandomFloats(15, 62, -2, 2);
  for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"}) {
    for (bool include_self : {true, false}) {
      OpTester t("aten.scatter_reduce.two");
      t.AddArg(t.Input(F32({4, 5}), self));
      t.AddArg(IntArg(0));
      t.AddArg(I64Input(t, {3, 5}, kIndex));
      t.AddArg(t.Input(F32({3, 5}), src));
      t.AddArg(StringArg(reduce));
      t.AddKwarg("include_self", BoolArg(include_self));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      ASSERT_TRUE(t.Run().ok());
      EXPECT_TRUE(AllClose(t.OutputF32(0), ReduceRef(self, src, reduce, include_self), 1e-6, 1e-6))
          << reduce << " include_self=" << include_self;
    }
  }
}

TEST(ScatterTest, ScatterAssignsAndAdds) {
  const auto self = RandomFloats(20, 63, -2, 2), src = RandomFloats(15, 64, -2, 2);
  for (const char* op : {"aten.scatter.src", "aten.scatter_add.default"}) {
    OpTester t(op);
    t.AddArg(t.Input(F32({4, 5}), self));
    t.AddArg(IntArg(-2));  // dim 0
    t.AddArg(I64Input(t, {3, 5}, kIndex));
    t.AddArg(t.Input(F32({3, 5}), src));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    const bool add = std::string(op) == "aten.scatter_add.default";
    EXPECT_TRUE(AllClose(t.OutputF32(0), ReduceRef(self, src, add ? "sum" : "assign", true), 1e-6,
                         1e-6)) << op;
  }
}

TEST(ScatterTest, ScatterValueAlongTheLastDimOfI64) {
  OpTester t("aten.scatter.value");
  t.AddArg(I64Input(t, {2, 3}, {1, 2, 3, 4, 5, 6}));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, {2, 2}, {2, 0, 1, 1}));
  t.AddArg(IntArg(int64_t{1} << 60));  // exact, not through a double
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  const int64_t big = int64_t{1} << 60;
  EXPECT_EQ(out.As<int64_t>(0), (std::vector<int64_t>{big, 2, big, 4, big, 6}));
}

TEST(ScatterTest, OutOfRangeIndexFailsTheRun) {
  OpTester t("aten.scatter_add.default");
  t.AddArg(t.Input(F32({2, 2}), {1, 2, 3, 4}));
  t.AddArg(IntArg(0));
  t.AddArg(I64Input(t, {1, 2}, {0, 2}));
  t.AddArg(t.Input(F32({1, 2}), {1, 1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexPutTest, AssignsAndAccumulatesAlongAnInnerDim) {
  // self [2, 4, 3]; indices (None, idx[5]) with repeats; values [5, 3] broadcast over dim 0.
  const auto self = RandomFloats(24, 65, -2, 2), values = RandomFloats(15, 66, -2, 2);
  const std::vector<int64_t> idx = {1, -1, 1, 0, 3};
  for (bool accumulate : {false, true}) {
    OpTester t("aten.index_put.default");
    t.AddArg(t.Input(F32({2, 4, 3}), self));
    const Arg index = I64Input(t, {5}, idx);
    t.AddArg(ListArg({NoneArg(), index}));
    t.AddArg(t.Input(F32({5, 3}), values));
    t.AddArg(BoolArg(accumulate));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> want(self.begin(), self.end());
    for (int p = 0; p < 2; ++p) {
      for (int i = 0; i < 5; ++i) {
        const int64_t row = idx[i] < 0 ? idx[i] + 4 : idx[i];
        for (int k = 0; k < 3; ++k) {
          double& w = want[(p * 4 + row) * 3 + k];
          w = accumulate ? w + values[i * 3 + k] : values[i * 3 + k];
        }
      }
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 1e-6)) << "accumulate=" << accumulate;
  }
}

// x[:, mask] = v and x[:, mask] += v with a [2, 3] mask over dims 1-2 of [2, 2, 3, 2].
TEST(IndexPutTest, BoolMaskWithOneValue) {
  const auto self = RandomFloats(24, 71, -2, 2);
  const std::vector<int> mask = {1, 0, 1, 0, 0, 1};
  for (bool accumulate : {false, true}) {
    OpTester t("aten.index_put.default");
    t.AddArg(t.Input(F32({2, 2, 3, 2}), self));
    const Arg m = BoolInput(t, {2, 3}, mask);
    t.AddArg(ListArg({NoneArg(), m}));
    t.AddArg(t.Input(F32({}), {-7.5f}));
    t.AddArg(BoolArg(accumulate));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> want(self.begin(), self.end());
    for (int i = 0; i < 24; ++i) {
      if (mask[(i / 2) % 6]) want[i] = accumulate ? want[i] - 7.5 : -7.5;
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 1e-6)) << accumulate;
  }
}

TEST(IndexPutTest, RefusesMaskedPutsOfManyValuesAndFailsOutOfRange) {
  // x[mask] = values with one value per set element: a data-dependent count.
  OpTester mask("aten.index_put.default");
  mask.AddArg(mask.Input(F32({3}), {1, 2, 3}));
  mask.AddArg(ListArg({BoolInput(mask, {3}, {1, 0, 1})}));
  mask.AddArg(mask.Input(F32({2}), {0, 0}));
  EXPECT_EQ(mask.Prepare().code(), absl::StatusCode::kUnimplemented);

  OpTester t("aten.index_put.default");
  t.AddArg(t.Input(F32({3}), {1, 2, 3}));
  t.AddArg(ListArg({I64Input(t, {1}, {3})}));
  t.AddArg(t.Input(F32({1}), {0}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ScatterTest, ScatterReduceAddsOrMultiplies) {
  const auto self = RandomFloats(20, 67, -2, 2), src = RandomFloats(15, 68, -2, 2);
  for (const char* reduce : {"add", "multiply"}) {
    OpTester t("aten.scatter.reduce");
    t.AddArg(t.Input(F32({4, 5}), self));
    t.AddArg(IntArg(0));
    t.AddArg(I64Input(t, {3, 5}, kIndex));
    t.AddArg(t.Input(F32({3, 5}), src));
    t.AddKwarg("reduce", StringArg(reduce));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    const bool add = std::string(reduce) == "add";
    EXPECT_TRUE(AllClose(t.OutputF32(0), ReduceRef(self, src, add ? "sum" : "prod", true), 1e-6,
                         1e-6)) << reduce;
  }
  OpTester v("aten.scatter.value_reduce");
  v.AddArg(v.Input(F32({2, 2}), {1, 2, 3, 4}));
  v.AddArg(IntArg(1));
  v.AddArg(I64Input(v, {2, 2}, {0, 0, 1, 1}));
  v.AddArg(FloatArg(3));
  v.AddKwarg("reduce", StringArg("multiply"));
  ASSERT_TRUE(v.Prepare().ok()) << v.Prepare();
  ASSERT_TRUE(v.Run().ok());
  EXPECT_TRUE(AllClose(v.OutputF32(0), {9, 2, 3, 36}, 0, 0));
}

// index_reduce along dim 1 of [2, 4]: source [2, 3] slices go to columns 3, 0, 3.
TEST(ScatterTest, IndexReduceReducesSlices) {
  const auto self = RandomFloats(8, 69, -2, 2), source = RandomFloats(6, 70, -2, 2);
  const std::vector<int64_t> index = {3, 0, 3};
  for (const char* reduce : {"prod", "mean", "amax", "amin"}) {
    for (bool include_self : {true, false}) {
      OpTester t("aten.index_reduce.default");
      t.AddArg(t.Input(F32({2, 4}), self));
      t.AddArg(IntArg(1));
      t.AddArg(I64Input(t, {3}, index));
      t.AddArg(t.Input(F32({2, 3}), source));
      t.AddArg(StringArg(reduce));
      t.AddKwarg("include_self", BoolArg(include_self));
      ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
      ASSERT_TRUE(t.Run().ok());
      std::vector<double> want(self.begin(), self.end());
      std::vector<int> count(8, 0);
      const std::string r = reduce;
      for (int row = 0; row < 2; ++row) {
        for (int i = 0; i < 3; ++i) {
          const int o = row * 4 + static_cast<int>(index[i]);
          const double v = source[row * 3 + i];
          if (count[o] == 0 && !include_self) {
            want[o] = v;
          } else if (r == "prod") {
            want[o] *= v;
          } else if (r == "mean") {
            want[o] += v;
          } else if (r == "amax") {
            want[o] = std::max(want[o], v);
          } else {
            want[o] = std::min(want[o], v);
          }
          ++count[o];
        }
      }
      if (r == "mean") {
        for (int o = 0; o < 8; ++o) {
          if (count[o] > 0) want[o] /= count[o] + (include_self ? 1 : 0);
        }
      }
      EXPECT_TRUE(AllClose(t.OutputF32(0), want, 1e-6, 1e-6)) << reduce << " " << include_self;
    }
  }
}

}  // namespace
}  // namespace kiln::runtime::testing
