// Tests the 3-D pooling ops (pooling3d.cc): small windows worked out by
// hand (including padding and NaN), and a depth-1 pooling against the 2-D
// op of pooling.cc on the same data, which shares ATen's window rules.
#include <cmath>
#include <limits>
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

std::vector<float> Iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(Pool3dTest, CubeByHand) {
  OpTester m("aten.max_pool3d_with_indices.default");
  m.AddArg(m.Input(F32({1, 1, 2, 2, 2}), Iota(8)));
  m.AddArg(IntListArg({2}));
  ASSERT_TRUE(m.Prepare().ok()) << m.Prepare();
  EXPECT_EQ(m.output_metas()[1], I64({1, 1, 1, 1, 1}));
  Outputs mo(m);
  ASSERT_TRUE(mo.Run(m).ok());
  EXPECT_TRUE(AllClose(mo.As<float>(0), {7}, 0, 0));
  EXPECT_EQ(mo.As<int64_t>(1), (std::vector<int64_t>{7}));

  // Padding 1, stride 2: every window holds one element; with the padding
  // counted the divisor is 8.
  for (bool count_pad : {true, false}) {
    OpTester a("aten.avg_pool3d.default");
    a.SetArgs({a.Input(F32({1, 2, 2, 2}), Iota(8)), IntListArg({2}), IntListArg({2}),
               IntListArg({1})});
    a.AddKwarg("count_include_pad", BoolArg(count_pad));
    ASSERT_TRUE(a.Prepare().ok()) << a.Prepare();
    EXPECT_EQ(a.output_metas()[0], F32({1, 2, 2, 2}));
    ASSERT_TRUE(a.Run().ok());
    std::vector<double> want;
    for (int i = 0; i < 8; ++i) want.push_back(count_pad ? i / 8.0 : i);
    EXPECT_TRUE(AllClose(a.OutputF32(0), want, 1e-7, 0)) << count_pad;
  }

  OpTester aa("aten._adaptive_avg_pool3d.default");
  aa.SetArgs({aa.Input(F32({1, 1, 2, 2, 2}), Iota(8)), IntListArg({1})});
  ASSERT_TRUE(aa.Prepare().ok()) << aa.Prepare();
  ASSERT_TRUE(aa.Run().ok());
  EXPECT_TRUE(AllClose(aa.OutputF32(0), {3.5}, 0, 0));

  OpTester am("aten.adaptive_max_pool3d.default");
  am.SetArgs({am.Input(F32({1, 2, 2, 2}), Iota(8)), IntListArg({1, 1, 2})});
  ASSERT_TRUE(am.Prepare().ok()) << am.Prepare();
  Outputs amo(am);
  ASSERT_TRUE(amo.Run(am).ok());
  EXPECT_TRUE(AllClose(amo.As<float>(0), {6, 7}, 0, 0));
  EXPECT_EQ(amo.As<int64_t>(1), (std::vector<int64_t>{6, 7}));
}

TEST(Pool3dTest, NaNWinsAndTheLastNaNIsKept) {
  std::vector<float> x = Iota(8);
  x[2] = x[5] = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* op;
    int64_t size;  // kernel_size, or output_size of the adaptive op
  };
  for (const Case& c : {Case{"aten.max_pool3d_with_indices.default", 2},
                        Case{"aten.adaptive_max_pool3d.default", 1}}) {
    const char* op = c.op;
    OpTester t(op);
    t.SetArgs({t.Input(F32({1, 2, 2, 2}), x), IntListArg({c.size})});
    ASSERT_TRUE(t.Prepare().ok()) << op << ": " << t.Prepare();
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok());
    EXPECT_TRUE(std::isnan(out.As<float>(0)[0])) << op;
    EXPECT_EQ(out.As<int64_t>(1), (std::vector<int64_t>{5})) << op;
  }
}

// Depth 1 with a depth-1 window is the 2-D op, element for element.
void ExpectSameAs2d(const std::string& op3, const std::string& op2,
                    const std::vector<Arg>& extra3, const std::vector<Arg>& extra2) {
  const std::vector<float> x = RandomFloats(2 * 3 * 7 * 9, 5);
  OpTester t3(op3), t2(op2);
  t3.AddArg(t3.Input(F32({2, 3, 1, 7, 9}), x));
  t2.AddArg(t2.Input(F32({2, 3, 7, 9}), x));
  for (const Arg& a : extra3) t3.AddArg(a);
  for (const Arg& a : extra2) t2.AddArg(a);
  ASSERT_TRUE(t3.Prepare().ok()) << op3 << ": " << t3.Prepare();
  ASSERT_TRUE(t2.Prepare().ok()) << op2 << ": " << t2.Prepare();
  Outputs o3(t3), o2(t2);
  ASSERT_TRUE(o3.Run(t3).ok());
  ASSERT_TRUE(o2.Run(t2).ok());
  const std::vector<float> want = o2.As<float>(0);
  EXPECT_TRUE(AllClose(o3.As<float>(0), std::vector<double>(want.begin(), want.end()), 0, 0))
      << op3;
  if (t3.output_metas().size() == 2) {
    EXPECT_EQ(o3.As<int64_t>(1), o2.As<int64_t>(1)) << op3;
  }
}

TEST(Pool3dTest, DepthOneMatchesThe2dOps) {
  ExpectSameAs2d("aten.max_pool3d_with_indices.default", "aten.max_pool2d_with_indices.default",
                 {IntListArg({1, 3, 2}), IntListArg({1, 2, 2}), IntListArg({0, 1, 1}),
                  IntListArg({1, 2, 1}), BoolArg(true)},
                 {IntListArg({3, 2}), IntListArg({2, 2}), IntListArg({1, 1}), IntListArg({2, 1}),
                  BoolArg(true)});
  ExpectSameAs2d("aten.avg_pool3d.default", "aten.avg_pool2d.default",
                 {IntListArg({1, 3, 3}), IntListArg({1, 2, 2}), IntListArg({0, 1, 1}),
                  BoolArg(true), BoolArg(false)},
                 {IntListArg({3, 3}), IntListArg({2, 2}), IntListArg({1, 1}), BoolArg(true),
                  BoolArg(false)});
  ExpectSameAs2d("aten._adaptive_avg_pool3d.default", "aten._adaptive_avg_pool2d.default",
                 {IntListArg({1, 3, 4})}, {IntListArg({3, 4})});
  ExpectSameAs2d("aten.adaptive_max_pool3d.default", "aten.adaptive_max_pool2d.default",
                 {IntListArg({1, 4, 5})}, {IntListArg({4, 5})});
}

TEST(Pool3dTest, RejectsBadShapesAndWindows) {
  OpTester rank("aten.avg_pool3d.default");
  rank.SetArgs({rank.Input(F32({2, 3, 4}), RandomFloats(24, 1)), IntListArg({2})});
  EXPECT_TRUE(IsInvalidArgument(rank.Prepare(), "5-D"));

  OpTester pad("aten.max_pool3d_with_indices.default");
  pad.SetArgs({pad.Input(F32({1, 4, 4, 4}), RandomFloats(64, 1)), IntListArg({2}),
               IntListArg({}), IntListArg({2})});
  EXPECT_TRUE(IsInvalidArgument(pad.Prepare(), "padding"));

  OpTester small("aten.max_pool3d_with_indices.default");
  small.SetArgs({small.Input(F32({1, 1, 4, 4}), RandomFloats(16, 1)), IntListArg({2})});
  EXPECT_TRUE(IsInvalidArgument(small.Prepare(), "output size"));
}

}  // namespace
}  // namespace kiln::runtime::testing
