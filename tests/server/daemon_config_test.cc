// kilnd's flags: the cache size cap from the flag, the environment and the
// default, the spin time, and bad values rejected with a message naming
// the source.
#include "server/daemon_config.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

absl::StatusOr<DaemonConfig> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kilnd");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseFlags(static_cast<int>(argv.size()), argv.data());
}

class DaemonConfigTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("KILN_CACHE_MAX_MB"); }
  void TearDown() override { ::unsetenv("KILN_CACHE_MAX_MB"); }
};

TEST_F(DaemonConfigTest, CacheCapDefaultsToTwoGiB) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cache_max_mb, 2048u);
}

TEST_F(DaemonConfigTest, CacheCapFlagOverridesTheEnvironment) {
  ::setenv("KILN_CACHE_MAX_MB", "100", 1);
  auto from_env = Parse({});
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->cache_max_mb, 100u);
  auto from_flag = Parse({"--cache-max-mb", "0"});
  ASSERT_TRUE(from_flag.ok()) << from_flag.status();
  EXPECT_EQ(from_flag->cache_max_mb, 0u);
  auto with_equals = Parse({"--cache-max-mb=512"});
  ASSERT_TRUE(with_equals.ok()) << with_equals.status();
  EXPECT_EQ(with_equals->cache_max_mb, 512u);
}

TEST_F(DaemonConfigTest, CacheCapRejectsNonNumbersNamingTheSource) {
  auto flag = Parse({"--cache-max-mb", "-5"});
  ASSERT_FALSE(flag.ok());
  EXPECT_NE(flag.status().message().find("--cache-max-mb"), std::string::npos);
  ::setenv("KILN_CACHE_MAX_MB", "lots", 1);
  auto env = Parse({});
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("KILN_CACHE_MAX_MB"), std::string::npos);
}

TEST_F(DaemonConfigTest, HelpTextDocumentsTheCacheCap) {
  const std::string help = HelpText();
  EXPECT_NE(help.find("--cache-max-mb"), std::string::npos);
  EXPECT_NE(help.find("KILN_CACHE_MAX_MB"), std::string::npos);
}

TEST_F(DaemonConfigTest, SpinTimeDefaultsToTwoMillisecondsAndRejectsNonsense) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->spin_us, 2000);
  auto off = Parse({"--spin-us", "0"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->spin_us, 0);
  for (const char* bad : {"-1", "2000000", "soon"}) {
    auto parsed = Parse({"--spin-us", bad});
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--spin-us"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::server
