// sort.cc: sort (stable, NaN last ascending and first descending), topk,
// kthvalue, median and nanmedian along an inner dim, against references
// the test computes by sorting each line itself.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// x [3, 6, 2] along dim 1, with a NaN and a tie in line (0, 0).
std::vector<float> Input() {
  auto x = RandomFloats(36, 71, -5, 5);
  x[2 * 2 + 0] = kNan;
  x[4 * 2 + 0] = x[1 * 2 + 0];
  return x;
}

// Positions of line (o, i) in ascending order, NaN last, ties by position.
std::vector<int64_t> Order(const std::vector<float>& x, int o, int i, bool descending) {
  std::vector<int64_t> order(6);
  std::iota(order.begin(), order.end(), 0);
  auto at = [&](int64_t j) { return x[(o * 6 + j) * 2 + i]; };
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float va = at(a), vb = at(b);
    if (descending) return (std::isnan(va) && !std::isnan(vb)) || va > vb;
    return (!std::isnan(va) && std::isnan(vb)) || va < vb;
  });
  return order;
}

TEST(SortTest, SortsStablyWithNanLast) {
  const auto x = Input();
  for (int form = 0; form < 4; ++form) {
    const bool descending = form & 1, stable_form = form & 2;
    OpTester t(stable_form ? "aten.sort.stable" : "aten.sort.default");
    t.AddArg(t.Input(F32({3, 6, 2}), x));
    if (stable_form) {  // (self, *, stable, dim, descending)
      t.AddKwarg("stable", BoolArg(true));
      t.AddKwarg("dim", IntArg(1));
      t.AddKwarg("descending", BoolArg(descending));
    } else {
      t.AddArg(IntArg(1));
      t.AddArg(BoolArg(descending));
    }
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    std::vector<double> want_v(36);
    std::vector<int64_t> want_i(36);
    for (int o = 0; o < 3; ++o) {
      for (int i = 0; i < 2; ++i) {
        const auto order = Order(x, o, i, descending);
        for (int j = 0; j < 6; ++j) {
          want_v[(o * 6 + j) * 2 + i] = x[(o * 6 + order[j]) * 2 + i];
          want_i[(o * 6 + j) * 2 + i] = order[j];
        }
      }
    }
    const auto v = out.As<float>(0);
    EXPECT_TRUE(AllClose(v, want_v, 0, 0)) << form;
    EXPECT_EQ(out.As<int64_t>(1), want_i) << form;
  }
}

TEST(SortTest, TopkAndKthvalue) {
  const auto x = Input();
  OpTester top("aten.topk.default");
  top.AddArg(top.Input(F32({3, 6, 2}), x));
  top.AddArg(IntArg(3));
  top.AddArg(IntArg(1));
  ASSERT_TRUE(top.Prepare().ok()) << top.Prepare();
  EXPECT_EQ(top.output_metas()[0], F32({3, 3, 2}));
  Outputs t_out(top);
  ASSERT_TRUE(t_out.Run(top).ok());

  OpTester kth("aten.kthvalue.default");
  kth.AddArg(kth.Input(F32({3, 6, 2}), x));
  kth.AddArg(IntArg(2));
  kth.AddArg(IntArg(1));
  ASSERT_TRUE(kth.Prepare().ok()) << kth.Prepare();
  EXPECT_EQ(kth.output_metas()[0], F32({3, 2}));
  Outputs k_out(kth);
  ASSERT_TRUE(k_out.Run(kth).ok());

  std::vector<double> want_top(18), want_kth(6);
  std::vector<int64_t> want_top_i(18), want_kth_i(6);
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 2; ++i) {
      const auto desc = Order(x, o, i, true), asc = Order(x, o, i, false);
      for (int j = 0; j < 3; ++j) {
        want_top[(o * 3 + j) * 2 + i] = x[(o * 6 + desc[j]) * 2 + i];
        want_top_i[(o * 3 + j) * 2 + i] = desc[j];
      }
      want_kth[o * 2 + i] = x[(o * 6 + asc[1]) * 2 + i];
      want_kth_i[o * 2 + i] = asc[1];
    }
  }
  EXPECT_TRUE(AllClose(t_out.As<float>(0), want_top, 0, 0));
  EXPECT_EQ(t_out.As<int64_t>(1), want_top_i);
  EXPECT_TRUE(AllClose(k_out.As<float>(0), want_kth, 0, 0));
  EXPECT_EQ(k_out.As<int64_t>(1), want_kth_i);
}

TEST(SortTest, MedianAndNanmedian) {
  // Lines of 5: [3, 1, nan, 2, 9] and [4, 8, 6, 5, 7].
  const std::vector<float> x = {3, 1, kNan, 2, 9, 4, 8, 6, 5, 7};
  OpTester med("aten.median.dim");
  med.AddArg(med.Input(F32({2, 5}), x));
  med.AddArg(IntArg(1));
  med.AddArg(BoolArg(true));
  ASSERT_TRUE(med.Prepare().ok()) << med.Prepare();
  EXPECT_EQ(med.output_metas()[0], F32({2, 1}));
  Outputs m(med);
  ASSERT_TRUE(m.Run(med).ok());
  EXPECT_TRUE(std::isnan(m.As<float>(0)[0]));
  EXPECT_EQ(m.As<int64_t>(1), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(m.As<float>(0)[1], 6.f);

  OpTester nan("aten.nanmedian.dim");
  nan.AddArg(nan.Input(F32({2, 5}), x));
  nan.AddArg(IntArg(-1));
  ASSERT_TRUE(nan.Prepare().ok()) << nan.Prepare();
  Outputs n(nan);
  ASSERT_TRUE(n.Run(nan).ok());
  // Numbers 3, 1, 2, 9: the lower median is 2 (position 3).
  EXPECT_TRUE(AllClose(n.As<float>(0), {2, 6}, 0, 0));
  EXPECT_EQ(n.As<int64_t>(1), (std::vector<int64_t>{3, 2}));

  for (const char* op : {"aten.median.default", "aten.nanmedian.default"}) {
    OpTester all(op);
    all.AddArg(all.Input(F32({2, 5}), x));
    ASSERT_TRUE(all.Prepare().ok()) << all.Prepare();
    EXPECT_EQ(all.output_metas().size(), 1u);
    EXPECT_EQ(all.output_metas()[0], F32({}));
    ASSERT_TRUE(all.Run().ok());
    const float v = all.OutputF32(0)[0];
    if (std::string(op) == "aten.median.default") {
      EXPECT_TRUE(std::isnan(v));
    } else {
      EXPECT_EQ(v, 5.f);  // 1 2 3 4 5 6 7 8 9: the fifth
    }
  }
}

TEST(SortTest, RefusesKOutsideTheDim) {
  OpTester t("aten.topk.default");
  t.AddArg(t.Input(F32({4}), {1, 2, 3, 4}));
  t.AddArg(IntArg(5));
  EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kInvalidArgument);
  OpTester k("aten.kthvalue.default");
  k.AddArg(k.Input(F32({4}), {1, 2, 3, 4}));
  k.AddArg(IntArg(0));
  EXPECT_EQ(k.Prepare().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::runtime::testing
