// The config file's lines: comments, blanks, quoting, and malformed lines
// reported with their line number.
#include "server/config_file.h"

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TEST(ConfigFileTest, KeysValuesCommentsAndBlankLines) {
  auto entries = ParseConfigText(
      "# a comment\n"
      "\n"
      "   cache-max-mb   =   4096   \n"
      "log-level=debug # trailing comment\r\n"
      "  # indented comment\n"
      "socket = /tmp/a#b.sock\n"
      "cache-dir =\n",
      "k.conf");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].line, 3);
  EXPECT_EQ((*entries)[0].key, "cache-max-mb");
  EXPECT_EQ((*entries)[0].value, "4096");
  EXPECT_EQ((*entries)[1].line, 4);
  EXPECT_EQ((*entries)[1].value, "debug");
  EXPECT_EQ((*entries)[2].value, "/tmp/a#b.sock");  // '#' inside a word is not a comment
  EXPECT_EQ((*entries)[3].key, "cache-dir");
  EXPECT_EQ((*entries)[3].value, "");
}

TEST(ConfigFileTest, QuotedValuesKeepSpacesHashesAndEscapedQuotes) {
  auto entries = ParseConfigText(
      "a = \"  two words # kept  \"\n"
      "b = \"say \\\"hi\\\" \\\\ back\"   # comment after the quote\n"
      "c = \"\"\n"
      "d = \"C:\\dir\"\n",
      "k.conf");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].value, "  two words # kept  ");
  EXPECT_EQ((*entries)[1].value, "say \"hi\" \\ back");
  EXPECT_EQ((*entries)[2].value, "");
  EXPECT_EQ((*entries)[3].value, "C:\\dir");  // a lone backslash stays
}

TEST(ConfigFileTest, MalformedLinesAreReportedWithPathAndLine) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {Case{"ok = 1\nno equals sign\n", "k.conf:2: expected 'key = value'"},
                        Case{"\n\n= value\n", "k.conf:3: missing key"},
                        Case{"a = \"open\n", "k.conf:1: unterminated quoted value"},
                        Case{"a = \"x\" trailing\n", "k.conf:1: unexpected 'trailing'"}}) {
    auto entries = ParseConfigText(c.text, "k.conf");
    ASSERT_FALSE(entries.ok()) << c.text;
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(entries.status().message()).rfind(c.message, 0), 0u)
        << entries.status().message();
  }
}

TEST(ConfigFileTest, MissingFileIsNotFoundNamingThePath) {
  auto entries = ReadConfigFile("/nonexistent/kilnd.conf");
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(entries.status().message().find("/nonexistent/kilnd.conf"), std::string::npos);
  EXPECT_EQ(ReadConfigFile("/tmp").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::server
