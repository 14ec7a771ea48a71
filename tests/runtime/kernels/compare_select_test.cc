// The logical ops and predicates of compare_select.cc against references
// the test computes (the comparisons and where are in
// typed_elementwise_test.cc): every dtype, broadcasting, NaN counted as
// true and as neither finite nor infinite.
#include <cmath>
#include <limits>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

struct LogicalCase {
  const char* op;
  bool (*ref)(bool, bool);
};

void PrintTo(const LogicalCase& c, std::ostream* os) { *os << c.op; }

class LogicalTest : public ::testing::TestWithParam<LogicalCase> {};

TEST_P(LogicalTest, MixedDTypesBroadcast) {
  const LogicalCase& c = GetParam();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {0, 2.5f, nan, -1, 0, 0};  // [2, 3]
  const std::vector<int64_t> y = {0, 7, 0};              // [3]
  OpTester t(c.op);
  t.AddArg(t.Input(F32({2, 3}), x));
  t.AddArg(I64Input(t, {3}, y));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], Bool({2, 3}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<uint8_t> want;
  std::vector<double> want_f;
  for (int i = 0; i < 6; ++i) {
    want.push_back(c.ref(x[i] != 0, y[i % 3] != 0));
    want_f.push_back(want.back());
  }
  const std::vector<uint8_t> got = t.OutputBool(0);
  EXPECT_EQ(got, want) << c.op;
  std::vector<float> got_f(got.begin(), got.end());
  EXPECT_TRUE(AllClose(got_f, want_f, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Ops, LogicalTest,
    ::testing::Values(LogicalCase{"aten.logical_and.default", [](bool a, bool b) { return a && b; }},
                      LogicalCase{"aten.logical_or.default", [](bool a, bool b) { return a || b; }},
                      LogicalCase{"aten.logical_xor.default",
                                  [](bool a, bool b) { return a != b; }}));

TEST(PredicateTest, IsnanAndIsinf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1, nan, inf, -inf, -0.f};
  struct Case {
    const char* op;
    std::vector<uint8_t> want;
  };
  for (const Case& c : {Case{"aten.isnan.default", {0, 1, 0, 0, 0}},
                        Case{"aten.isinf.default", {0, 0, 1, 1, 0}}}) {
    OpTester t(c.op);
    t.AddArg(t.Input(F32({5}), x));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], Bool({5}));
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputBool(0), c.want) << c.op;
    OpTester i(c.op);  // integers are never NaN or infinite
    i.AddArg(I64Input(i, {2}, {0, std::numeric_limits<int64_t>::max()}));
    ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
    ASSERT_TRUE(i.Run().ok());
    EXPECT_EQ(i.OutputBool(0), (std::vector<uint8_t>{0, 0})) << c.op;
  }
}

// The sign bit, not the comparison x < 0: -0.0 and a negative NaN have it.
TEST(PredicateTest, Signbit) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("aten.signbit.default");
  t.AddArg(t.Input(F32({6}), {1.5f, -2.f, 0.f, -0.f, nan, -nan}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], Bool({6}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_EQ(t.OutputBool(0), (std::vector<uint8_t>{0, 1, 0, 1, 0, 1}));
  OpTester i("aten.signbit.default");
  i.AddArg(I64Input(i, {3}, {-3, 0, 7}));
  ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
  ASSERT_TRUE(i.Run().ok());
  EXPECT_EQ(i.OutputBool(0), (std::vector<uint8_t>{1, 0, 0}));
}

}  // namespace
}  // namespace kiln::runtime::testing
