// Tests aten.roll.default: one and several dims, negative and oversized
// shifts, repeated dims, and the flattened form.
#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

struct RollCase {
  std::vector<int64_t> shape, shifts, dims;
};

class RollTest : public ::testing::TestWithParam<RollCase> {};

TEST_P(RollTest, MatchesReference) {
  const RollCase& c = GetParam();
  const auto x = RandomFloats(NumElements(c.shape), 61);
  OpTester t("aten.roll.default");
  t.SetArgs({t.Input(F32(c.shape), x), IntListArg(c.shifts), IntListArg(c.dims)});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32(c.shape));
  ASSERT_TRUE(t.Run().ok());
  const int rank = static_cast<int>(c.shape.size());
  const int64_t numel = NumElements(c.shape);
  std::vector<double> expected(numel);
  if (c.dims.empty()) {
    for (int64_t i = 0; i < numel; ++i) expected[Mod(i + c.shifts[0], numel)] = x[i];
  } else {
    std::vector<int64_t> shift(rank, 0);
    for (size_t i = 0; i < c.dims.size(); ++i) {
      const int d = static_cast<int>(c.dims[i] < 0 ? c.dims[i] + rank : c.dims[i]);
      shift[d] += c.shifts[i];
    }
    for (int64_t i = 0; i < numel; ++i) {
      int64_t rem = i, dst = 0, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t idx = rem % c.shape[d];
        rem /= c.shape[d];
        dst += Mod(idx + shift[d], c.shape[d]) * stride;
        stride *= c.shape[d];
      }
      expected[dst] = x[i];
    }
  }
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Shifts, RollTest,
    ::testing::Values(RollCase{{1, 56, 56, 96}, {-3, -3}, {1, 2}},  // swin
                      RollCase{{1, 56, 56, 96}, {3, 3}, {1, 2}},
                      RollCase{{4, 7}, {2}, {-1}},
                      RollCase{{4, 7}, {-9}, {0}},       // |shift| > size
                      RollCase{{3, 5}, {1, 2}, {1, 1}},  // same dim twice
                      RollCase{{2, 3, 4}, {5}, {}},      // flattened
                      RollCase{{2, 0, 3}, {1}, {0}}));   // empty

TEST(RollTest, RollRejectsMismatchedShiftsAndDims) {
  OpTester t("aten.roll.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntListArg({1, 2}),
             IntListArg({0})});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "same length"));
}

TEST(RollTest, RollRejectsOutOfRangeDim) {
  OpTester t("aten.roll.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)), IntListArg({1}),
             IntListArg({2})});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "out of range"));
}

}  // namespace
}  // namespace kiln::runtime::testing
