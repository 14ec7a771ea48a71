// The config file is TOML: its top-level keys become command-line values in
// the order of their lines; what TOML refuses, and tables and arrays, are
// reported with the file and line.
#include "server/config_file.h"

#include <string>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(ConfigFileTest, ValuesBecomeCommandLineValuesInLineOrder) {
  auto entries = ParseConfigText(
      "# a comment\n"
      "\n"
      "   threads   =   3   \n"
      "log-level = \"debug\" # trailing comment\r\n"
      "  # indented comment\n"
      "socket = '/tmp/a#b.sock'\n"
      "idle-exit-min = 0.25\n"
      "no-cache = false\n"
      "cache-dir = \"\"\n"
      "cache-max-mb = 1_024\n",
      "k.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 7u);
  const char* expected[][2] = {{"threads", "3"},
                               {"log-level", "debug"},
                               {"socket", "/tmp/a#b.sock"},
                               {"idle-exit-min", "0.25"},
                               {"no-cache", "false"},
                               {"cache-dir", ""},
                               {"cache-max-mb", "1024"}};
  const int lines[] = {3, 4, 6, 7, 8, 9, 10};
  for (size_t i = 0; i < entries->size(); ++i) {
    EXPECT_EQ((*entries)[i].key, expected[i][0]) << i;
    EXPECT_EQ((*entries)[i].value, expected[i][1]) << i;
    EXPECT_EQ((*entries)[i].line, lines[i]) << i;
  }
}

TEST(ConfigFileTest, StringsFollowTomlsQuoting) {
  auto entries = ParseConfigText(
      "a = \"  two words # kept  \"\n"
      "b = \"say \\\"hi\\\" \\\\ back\"   # comment after the quote\n"
      "c = 'C:\\dir'\n",
      "k.toml");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  EXPECT_EQ((*entries)[0].value, "  two words # kept  ");
  EXPECT_EQ((*entries)[1].value, "say \"hi\" \\ back");
  EXPECT_EQ((*entries)[2].value, "C:\\dir");  // literal strings have no escapes
}

TEST(ConfigFileTest, ErrorsNameThePathAndLine) {
  struct Case {
    const char* text;
    const char* prefix;
    const char* contains;
  };
  for (const Case& c : {
           Case{"ok = 1\nno equals sign\n", "k.toml:2:", "text values are quoted"},
           Case{"log-level = info\n", "k.toml:1:", "text values are quoted"},
           Case{"a = \"open\n", "k.toml:1:", ""},
           Case{"a = 1\na = 2\n", "k.toml:2:", ""},
           Case{"\n[section]\nx = 1\n", "k.toml:2: 'section' is a table", ""},
           Case{"a.b = 1\n", "k.toml:1: 'a' is a table", ""},
           Case{"xs = [1, 2]\n", "k.toml:1: 'xs' is an array", ""},
           Case{"when = 1979-05-27\n", "k.toml:1: 'when' is a date or time", ""},
       }) {
    auto entries = ParseConfigText(c.text, "k.toml");
    ASSERT_FALSE(entries.ok()) << c.text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(entries.status().message());
    EXPECT_EQ(message.rfind(c.prefix, 0), 0u) << message;
    EXPECT_NE(message.find(c.contains), std::string::npos) << message;
  }
}

TEST(ConfigFileTest, MissingFileIsNotFoundNamingThePath) {
  auto entries = ReadConfigFile("/nonexistent/kilnd.toml");
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(entries.status().message().find("/nonexistent/kilnd.toml"), std::string::npos);
  EXPECT_EQ(ReadConfigFile("/tmp").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::server
