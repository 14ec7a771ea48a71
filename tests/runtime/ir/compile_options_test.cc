// CompileOptions parsing: every key, defaults, and INVALID_ARGUMENT naming
// the key and the valid values for anything else.
#include "runtime/ir/compile_options.h"

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

TEST(CompileOptions, EmptyMapGivesDefaults) {
  auto o = ParseCompileOptions({});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, CompileOptions());
  EXPECT_EQ(o->num_threads, 0);
  EXPECT_EQ(o->hint, ExecutionHint::kLatency);
  EXPECT_EQ(o->precision, Precision::kF32);
}

TEST(CompileOptions, ParsesEveryKey) {
  auto o = ParseCompileOptions(
      {{"num_threads", "3"}, {"hint", "throughput"}, {"precision", "bf16"}, {"layout", "nchw"},
       {"branches", "on"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->num_threads, 3);
  EXPECT_EQ(o->hint, ExecutionHint::kThroughput);
  EXPECT_EQ(o->precision, Precision::kBf16);
  EXPECT_EQ(o->layout, LayoutOption::kNchw);
  EXPECT_EQ(o->branches, BranchMode::kOn);
  EXPECT_EQ(CompileOptionsString(*o),
            "num_threads=3 hint=throughput precision=bf16 layout=nchw branches=on");
  EXPECT_EQ(CompileOptionsString(CompileOptions()),
            "num_threads=default hint=latency precision=f32 layout=auto branches=off");
}

void ExpectInvalid(const std::map<std::string, std::string>& options, const std::string& fragment) {
  auto o = ParseCompileOptions(options);
  ASSERT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument) << o.status();
  EXPECT_NE(std::string(o.status().message()).find(fragment), std::string::npos)
      << o.status().message();
}

TEST(CompileOptions, RejectsUnknownKeyListingValidOnes) {
  ExpectInvalid({{"threads", "2"}}, "valid options: num_threads, hint, precision");
}

TEST(CompileOptions, RejectsBadNumThreads) {
  for (const char* bad : {"0", "-1", "257", "two", "", "1.5"}) {
    ExpectInvalid({{"num_threads", bad}}, "an integer from 1 to 256");
  }
}

TEST(CompileOptions, RejectsBadHintAndPrecision) {
  ExpectInvalid({{"hint", "fast"}}, "latency, throughput");
  ExpectInvalid({{"precision", "fp16"}}, "f32, bf16, auto");
  ExpectInvalid({{"precision", "BF16"}}, "f32, bf16, auto");  // the client normalises case
}

TEST(CompileOptions, RejectsBadBranchMode) {
  ExpectInvalid({{"branches", "yes"}}, "off, auto, on");
}

TEST(CompileOptions, ParsesEveryLayout) {
  for (const auto& [name, layout] :
       std::vector<std::pair<std::string, LayoutOption>>{{"auto", LayoutOption::kAuto},
                                                          {"nchw", LayoutOption::kNchw},
                                                          {"nhwc", LayoutOption::kNhwc},
                                                          {"blocked", LayoutOption::kBlocked}}) {
    auto o = ParseCompileOptions({{"layout", name}});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->layout, layout);
    EXPECT_EQ(CompileOptionsString(*o),
              "num_threads=default hint=latency precision=f32 layout=" + name + " branches=off");
  }
  ExpectInvalid({{"layout", "nchw8c"}}, "auto, nchw, nhwc, blocked");
}

TEST(CompileOptionsTest, AutoPrecisionIsBf16WhereTheCpuComputesItNatively) {
  // Decided from the CPU's flags, read here independently of CpuFeatures.
  bool native = false;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("flags", 0) == 0) {
      native = line.find(" avx512_bf16") != std::string::npos ||
               line.find(" amx_bf16") != std::string::npos;
      break;
    }
  }
  EXPECT_EQ(NativeBf16(), native);
  auto o = ParseCompileOptions({{"precision", "auto"}});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->precision_auto);
  EXPECT_EQ(o->precision, native ? Precision::kBf16 : Precision::kF32);
  EXPECT_NE(CompileOptionsString(*o).find(native ? "precision=bf16 (auto)"
                                                 : "precision=f32 (auto: no native bf16)"),
            std::string::npos)
      << CompileOptionsString(*o);
}

}  // namespace
}  // namespace kiln::runtime
