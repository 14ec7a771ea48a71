// Tests aten.cummax.default and aten.cummin.default (cum_extreme.cc)
// against scans done here: ties move the index, NaN sticks, any dim.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(CumExtremeTest, TiesMoveTheIndexAndNaNSticks) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.cummax.default");
  t.AddArg(t.Input(F32({7}), {1, 3, 3, nan, 2, nan, 5}));
  t.AddArg(IntArg(0));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_EQ(t.output_metas().size(), 2u);
  EXPECT_EQ(t.output_metas()[1], I64({7}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_TRUE(AllClose(out.As<float>(0), {1, 3, 3, NAN, NAN, NAN, NAN}, 0, 0));
  EXPECT_EQ(out.As<int64_t>(1), (std::vector<int64_t>{0, 1, 2, 3, 3, 5, 5}));

  OpTester m("aten.cummin.default");
  m.AddArg(m.Input(F32({5}), {3, 1, 1, 2, 0}));
  m.AddArg(IntArg(-1));
  ASSERT_TRUE(m.Prepare().ok()) << m.Prepare();
  Outputs mo(m);
  ASSERT_TRUE(mo.Run(m).ok());
  EXPECT_TRUE(AllClose(mo.As<float>(0), {3, 1, 1, 1, 0}, 0, 0));
  EXPECT_EQ(mo.As<int64_t>(1), (std::vector<int64_t>{0, 1, 2, 2, 4}));
}

TEST(CumExtremeTest, I64AndI32AlongAMiddleDim) {
  std::vector<int64_t> x(2 * 4 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int64_t>((i * 7919) % 11) - 5;
  for (bool is_max : {true, false}) {
    OpTester t(is_max ? "aten.cummax.default" : "aten.cummin.default");
    t.AddArg(I64Input(t, {2, 4, 3}, x));
    t.AddArg(IntArg(1));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    std::vector<int64_t> want(x.size()), want_at(x.size());
    for (int o = 0; o < 2; ++o) {
      for (int i = 0; i < 3; ++i) {
        int64_t best = 0, at = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t v = x[o * 12 + k * 3 + i];
          if (k == 0 || (is_max ? v >= best : v <= best)) best = v, at = k;
          want[o * 12 + k * 3 + i] = best;
          want_at[o * 12 + k * 3 + i] = at;
        }
      }
    }
    EXPECT_EQ(out.As<int64_t>(0), want);
    EXPECT_EQ(out.As<int64_t>(1), want_at);
  }
  OpTester i32("aten.cummax.default");
  i32.AddArg(I32Input(i32, {4}, {-1, -3, 7, 7}));
  i32.AddArg(IntArg(0));
  ASSERT_TRUE(i32.Prepare().ok()) << i32.Prepare();
  EXPECT_EQ(i32.output_metas()[0], I32({4}));
  Outputs io(i32);
  ASSERT_TRUE(io.Run(i32).ok());
  EXPECT_EQ(io.As<int32_t>(0), (std::vector<int32_t>{-1, -1, 7, 7}));
  EXPECT_EQ(io.As<int64_t>(1), (std::vector<int64_t>{0, 0, 2, 3}));
}

TEST(CumExtremeTest, ZeroDimAndRejectsBadDims) {
  OpTester t("aten.cummin.default");
  t.AddArg(t.Input(F32({}), {4}));
  t.AddArg(IntArg(-1));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({}));
  Outputs out(t);
  ASSERT_TRUE(out.Run(t).ok());
  EXPECT_EQ(out.As<int64_t>(1), (std::vector<int64_t>{0}));

  OpTester bad("aten.cummax.default");
  bad.AddArg(bad.Input(F32({2}), {1, 2}));
  bad.AddArg(IntArg(3));
  EXPECT_FALSE(bad.Prepare().ok());
}

}  // namespace
}  // namespace kiln::runtime::testing
