// kilnd's flags: the cache size cap from the flag, the environment and the
// default, the spin time, and bad values rejected with a message naming
// the source; the config file's place between flags and environment, its
// errors naming file and line; idle exit, metrics port and log format.
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
    for (const char* name : {"KILN_CACHE_MAX_MB", "KILN_TOKEN_FILE", "KILN_CONFIG_FILE",
                             "KILN_LOG_FORMAT", "KILN_LOG_LEVEL"}) {
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    SetUp();
    for (const std::string& path : files_) std::filesystem::remove(path);
  }

  // A config file holding `text`, removed after the test.
  std::string ConfigFile(const std::string& text) {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("kiln-config-" + std::to_string(getpid()) + "-" +
                               std::to_string(files_.size()) + ".conf"))
                                 .string();
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

 private:
  std::vector<std::string> files_;
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

TEST_F(DaemonConfigTest, ConfigFileSitsBetweenFlagsAndEnvironment) {
  ::setenv("KILN_CACHE_MAX_MB", "100", 1);
  ::setenv("KILN_LOG_LEVEL", "warn", 1);
  const std::string path = ConfigFile(
      "# kilnd settings\n"
      "\n"
      "cache-max-mb = 4096\n"
      "log-level = \"debug\"   # while we look into it\n"
      "threads=3\n");
  auto from_file = Parse({"--config", path});
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_EQ(from_file->cache_max_mb, 4096u);  // file over environment
  EXPECT_EQ(from_file->log_level, "debug");
  EXPECT_EQ(from_file->threads, 3);
  EXPECT_EQ(from_file->config_file, path);
  // Flags over the file, wherever they stand relative to --config.
  auto flags = Parse({"--cache-max-mb", "7", "--config", path, "--log-level=error"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->cache_max_mb, 7u);
  EXPECT_EQ(flags->log_level, "error");
  EXPECT_EQ(flags->threads, 3);
  // What the file leaves alone keeps the environment's value.
  auto partial = Parse({"--config", ConfigFile("threads = 2\n")});
  ASSERT_TRUE(partial.ok()) << partial.status();
  EXPECT_EQ(partial->cache_max_mb, 100u);
  EXPECT_EQ(partial->log_level, "warn");
}

TEST_F(DaemonConfigTest, ConfigFileComesFromTheEnvironmentUnlessAFlagNamesOne) {
  ::setenv("KILN_CONFIG_FILE", ConfigFile("threads = 5\n").c_str(), 1);
  auto from_env = Parse({});
  ASSERT_TRUE(from_env.ok()) << from_env.status();
  EXPECT_EQ(from_env->threads, 5);
  auto flag = Parse({"--config", ConfigFile("threads = 6\n")});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->threads, 6);
  auto none = Parse({"--config", ""});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->threads, 0);
}

TEST_F(DaemonConfigTest, ConfigFileSwitchesAndQuotedValues) {
  const std::string path = ConfigFile(
      "cache-dir = \"/tmp/a dir # not a comment\"\n"
      "log-file = \"/tmp/say \\\"hi\\\".log\"  # escaped quotes\n"
      "socket = '/tmp/s#1.sock'  # a literal string\n"
      "idle-exit-min = 0.5\n");
  auto quoted = Parse({"--config", path});
  ASSERT_TRUE(quoted.ok()) << quoted.status();
  EXPECT_EQ(quoted->cache_dir, "/tmp/a dir # not a comment");
  EXPECT_EQ(quoted->log_file, "/tmp/say \"hi\".log");
  EXPECT_EQ(quoted->socket_path, "/tmp/s#1.sock");
  EXPECT_DOUBLE_EQ(quoted->idle_exit_min, 0.5);
  auto off = Parse({"--config", ConfigFile("cache-dir = \"/tmp/c\"\nno-cache = true\n")});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->cache_dir, "");
  auto kept = Parse({"--config", ConfigFile("cache-dir = \"/tmp/c\"\nno-cache = false\n")});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->cache_dir, "/tmp/c");
}

TEST_F(DaemonConfigTest, ConfigFileErrorsNameTheFileAndLine) {
  struct Case {
    std::string text;
    std::string expected;  // after "<path>:"
  };
  for (const Case& c : std::vector<Case>{
           {"threads = 2\n\ncache-max-mbs = 1\n", "3: unknown key 'cache-max-mbs'"},
           {"# ok\ncache-max-mb = \"lots\"\n", "2: --cache-max-mb takes a number of MiB"},
           {"log-level = \"loud\"\n", "1: --log-level takes one of"},
           {"no-cache = \"maybe\"\n", "1: --no-cache takes true or false"},
           {"threads 4\n", "1:"},
           {"log-level = info\n", "1:"},
           {"log-file = \"/tmp/x\n", "1:"},
           {"threads = 2\nthreads = 3\n", "2:"},
           {"[cache]\nmax-mb = 4\n", "1: 'cache' is a table"},
           {"threads = [2, 3]\n", "1: 'threads' is an array"},
           {"help = true\n", "1: 'help' can only be given on the command line"},
           {"version = true\n", "1: 'version' can only be given on the command line"},
           {"\nconfig = \"/etc/other.conf\"\n", "2: 'config' can only be given on the command line"},
           {"test-call-gate = \"/tmp/gate\"\n",
            "1: 'test-call-gate' can only be given on the command line"},
       }) {
    const std::string path = ConfigFile(c.text);
    auto parsed = Parse({"--config", path});
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(parsed.status().message()).rfind(path + ":" + c.expected, 0), 0u)
        << parsed.status().message();
  }
  auto missing = Parse({"--config", "/nonexistent/kilnd.conf"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/kilnd.conf"), std::string::npos);
}

TEST_F(DaemonConfigTest, HelpAndVersionDoNotReadTheConfigFile) {
  auto help = Parse({"--config", "/nonexistent/kilnd.conf", "--help"});
  ASSERT_TRUE(help.ok()) << help.status();
  EXPECT_TRUE(help->help);
  EXPECT_TRUE(Parse({"--version", "--config", "/nonexistent/kilnd.conf"}).ok());
}

TEST_F(DaemonConfigTest, IdleExitTakesFractionalMinutes) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->idle_exit_min, 0.0);
  auto set = Parse({"--idle-exit-min", "0.05"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_DOUBLE_EQ(set->idle_exit_min, 0.05);
  for (const char* bad : {"-1", "soon", "nan", "inf", "1e9"}) {
    auto parsed = Parse({"--idle-exit-min", bad});
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("--idle-exit-min"), std::string::npos);
  }
}

TEST_F(DaemonConfigTest, MetricsPortIsOffByDefaultAndRangeChecked) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->metrics_port, 0);
  auto set = Parse({"--metrics-port", "9464"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->metrics_port, 9464);
  EXPECT_FALSE(Parse({"--metrics-port", "65536"}).ok());
  EXPECT_FALSE(Parse({"--metrics-port", "-1"}).ok());
}

TEST_F(DaemonConfigTest, LogFormatFromFlagOrEnvironment) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->log_format, "text");
  ::setenv("KILN_LOG_FORMAT", "json", 1);
  auto env = Parse({});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->log_format, "json");
  auto flag = Parse({"--log-format", "text"});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_EQ(flag->log_format, "text");
  EXPECT_FALSE(Parse({"--log-format", "xml"}).ok());
  ::setenv("KILN_LOG_FORMAT", "yaml", 1);
  auto bad_env = Parse({});
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().message().find("KILN_LOG_FORMAT"), std::string::npos);
}

TEST_F(DaemonConfigTest, TestCallGateIsOffUnlessTheCommandLineNamesOne) {
  auto config = Parse({});
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->test_call_gate, "");
  auto set = Parse({"--test-call-gate", "/tmp/kt-gate"});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->test_call_gate, "/tmp/kt-gate");
}

TEST_F(DaemonConfigTest, HelpTextDocumentsTheNewFlags) {
  const std::string help = HelpText();
  for (const char* text : {"--config FILE", "KILN_CONFIG_FILE", "--idle-exit-min",
                           "--metrics-port", "127.0.0.1", "--log-format", "KILN_LOG_FORMAT"}) {
    EXPECT_NE(help.find(text), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace kiln::server
