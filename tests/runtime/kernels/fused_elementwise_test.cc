// kiln.elementwise as one op node: programs run over every element (block
// tails included) against double-precision references, single-element
// inputs broadcast, and bad nodes are refused with INVALID_ARGUMENT naming
// the node.
#include <cmath>
#include <vector>

#include "tests/runtime/kernels/kernel_test_util.h"

namespace kiln::runtime::testing {
namespace {

Arg Program(const std::vector<std::string>& instrs) {
  Arg a;
  a.kind = Arg::Kind::kList;
  for (const std::string& s : instrs) a.list.push_back(StringArg(s));
  return a;
}

TEST(FusedElementwiseTest, RunsAProgramOverEveryElement) {
  // (x * y + 1.5) reused twice: t1 * sigmoid(t1), then fma(t3, -2, y).
  for (int64_t n : {1, 8, 63, 64, 65, 130, 5000}) {
    const auto x = RandomFloats(n, 1, -3.f, 3.f), y = RandomFloats(n, 2, -3.f, 3.f);
    OpTester t("kiln.elementwise");
    t.AddArg(t.Input(F32({n}), x));
    t.AddArg(t.Input(F32({n}), y));
    t.AddArg(Program({"mul(x0,x1)", "add(t0,1.5)", "sigmoid(t1)", "mul(t1,t2)", "fma(t3,-2,x1)"}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], F32({n}));
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> expected;
    for (int64_t i = 0; i < n; ++i) {
      const double t1 = static_cast<double>(x[i]) * y[i] + 1.5;
      expected.push_back(t1 / (1 + std::exp(-t1)) * -2 + y[i]);
    }
    EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 2e-6, 1e-6)) << n;
  }
}

TEST(FusedElementwiseTest, SingleElementInputsBroadcast) {
  const auto x = RandomFloats(40, 3);
  OpTester t("kiln.elementwise");
  t.AddArg(t.Input(F32({1}), {2.0f}));
  t.AddArg(t.Input(F32({5, 8}), x));
  t.AddArg(Program({"div(x1,x0)", "clamp(t0,-0.25,inf)"}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({5, 8}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> expected;
  for (float v : x) expected.push_back(std::max(v / 2.0, -0.25));
  EXPECT_TRUE(AllClose(t.OutputF32(0), expected, 0, 0));
}

TEST(FusedElementwiseTest, RejectsInputsThatBroadcastOtherwise) {
  OpTester t("kiln.elementwise");
  t.AddArg(t.Input(F32({4, 8}), RandomFloats(32, 1)));
  t.AddArg(t.Input(F32({8}), RandomFloats(8, 2)));
  t.AddArg(Program({"add(x0,x1)"}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "nor a single element"));
}

TEST(FusedElementwiseTest, RejectsBadPrograms) {
  for (const auto& program : std::vector<std::vector<std::string>>{
           {}, {"exp(x1)"}, {"exp(x0)", "add(t1,t0)"}, {"frobnicate(x0)"}}) {
    OpTester t("kiln.elementwise");
    t.AddArg(t.Input(F32({4}), RandomFloats(4, 1)));
    t.AddArg(Program(program));
    EXPECT_EQ(t.Prepare().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(t.Prepare().message()).find("node 'node_under_test'"), std::string::npos)
        << t.Prepare();
  }
}

TEST(FusedElementwiseTest, RejectsProgramsKeepingTooManyResultsAlive) {
  std::vector<std::string> program;
  for (int i = 0; i < 20; ++i) program.push_back("exp(x0)");
  for (int i = 1; i < 20; ++i) program.push_back(absl::StrCat("add(t", i - 1, ",t", i, ")"));
  OpTester t("kiln.elementwise");
  t.AddArg(t.Input(F32({4}), RandomFloats(4, 1)));
  t.AddArg(Program(program));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "results alive at once"));
}

TEST(FusedElementwiseTest, RejectsNonF32Inputs) {
  const int64_t ids[4] = {1, 2, 3, 4};
  OpTester t("kiln.elementwise");
  t.AddArg(t.RawInput(TensorMeta{DType::kI64, {4}}, ids, sizeof ids));
  t.AddArg(Program({"neg(x0)"}));
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "must be f32"));
}

}  // namespace
}  // namespace kiln::runtime::testing
