// kilnd's flags: the cache size cap from the flag, the environment and the
// default, the spin time, and bad values rejected with a message naming
// the source.
#include "server/daemon_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
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
  void SetUp() override {
    ::unsetenv("KILN_CACHE_MAX_MB");
    ::unsetenv("KILN_TOKEN_FILE");
  }
  void TearDown() override { SetUp(); }
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

TEST_F(DaemonConfigTest, TcpNeedsATokenFileAndTlsNeedsTcp) {
  auto bare = Parse({"--tcp", "127.0.0.1:7000"});
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.status().message().find("--token-file"), std::string::npos);
  EXPECT_TRUE(Parse({"--tcp", "127.0.0.1:7000", "--token-file", "/x"}).ok());
  ::setenv("KILN_TOKEN_FILE", "/x", 1);
  EXPECT_TRUE(Parse({"--tcp", "127.0.0.1:7000"}).ok());
  EXPECT_FALSE(Parse({"--tcp", "127.0.0.1:7000", "--tls-cert", "c.pem"}).ok());
  EXPECT_FALSE(Parse({"--tls-cert", "c.pem", "--tls-key", "k.pem"}).ok());
  EXPECT_TRUE(
      Parse({"--tcp", "127.0.0.1:7000", "--tls-cert", "c.pem", "--tls-key", "k.pem"}).ok());
}

TEST_F(DaemonConfigTest, TokenFileMustBePrivateAndLongEnough) {
  namespace fs = std::filesystem;
  const fs::path path = fs::temp_directory_path() / ("kiln-token-" + std::to_string(getpid()));
  std::ofstream(path) << "  0123456789abcdefXYZ\n";
  chmod(path.c_str(), 0644);
  EXPECT_EQ(ReadTokenFile(path.string()).status().code(), absl::StatusCode::kPermissionDenied);
  chmod(path.c_str(), 0600);
  auto token = ReadTokenFile(path.string());
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "0123456789abcdefXYZ");
  std::ofstream(path) << "short";
  EXPECT_EQ(ReadTokenFile(path.string()).status().code(), absl::StatusCode::kInvalidArgument);
  fs::remove(path);
  EXPECT_EQ(ReadTokenFile(path.string()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DaemonConfigTest, ClientCapsHaveDefaultsAndFlags) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->limits.max_handles, 4096u);
  EXPECT_EQ(config->limits.max_region_bytes, uint64_t{64} << 30);
  auto set = Parse({"--max-client-handles", "10", "--max-client-shm-mb", "256",
                    "--max-client-constant-mb=512"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->limits.max_handles, 10u);
  EXPECT_EQ(set->limits.max_region_bytes, uint64_t{256} << 20);
  EXPECT_EQ(set->limits.max_constant_bytes, uint64_t{512} << 20);
  EXPECT_FALSE(Parse({"--max-client-handles", "0"}).ok());
  EXPECT_FALSE(Parse({"--max-client-shm-mb", "lots"}).ok());
}

}  // namespace
}  // namespace kiln::server
