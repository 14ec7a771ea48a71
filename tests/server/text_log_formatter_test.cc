// The text log: one record per line whatever the message holds, escapes
// that cannot be mistaken for the client's own text, UTF-8 kept.
#include "server/text_log_formatter.h"

#include "gtest/gtest.h"
#include "spdlog/details/log_msg.h"

namespace kiln::server {
namespace {

std::string Escaped(absl::string_view text) {
  std::string out;
  AppendLogEscaped(text, &out);
  return out;
}

TEST(TextLogFormatterTest, ControlCharactersAreEscaped) {
  EXPECT_EQ(Escaped("plain text, (parens) 'quotes' \"too\""),
            "plain text, (parens) 'quotes' \"too\"");
  EXPECT_EQ(Escaped("a\nb\rc\td"), "a\\nb\\rc\\td");
  EXPECT_EQ(Escaped(std::string("\x1b[31mred\x07\x7f\0", 11)), "\\x1b[31mred\\x07\\x7f\\x00");
  // A backslash is escaped too: "\n" in the log is always an escaped byte.
  EXPECT_EQ(Escaped("C:\\n"), "C:\\\\n");
}

TEST(TextLogFormatterTest, Utf8IsKeptOtherBytesAreEscaped) {
  EXPECT_EQ(Escaped("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");
  EXPECT_EQ(Escaped("\xff\xc3"), "\\xff\\xc3");
  // U+2028 (a line separator to some viewers) is valid UTF-8 and kept; it
  // is not a newline to the log's readers that split lines.
  EXPECT_EQ(Escaped("\xe2\x80\xa8"), "\xe2\x80\xa8");
}

TEST(TextLogFormatterTest, ARecordWithNewlinesIsOneLine) {
  auto formatter = MakeTextLogFormatter();
  const std::string forged =
      "session 1234 opened by pid 1 (x)\n2026-01-01 00:00:00.000 [kilnd 1] info forged";
  spdlog::details::log_msg msg("kilnd", spdlog::level::info,
                               spdlog::string_view_t(forged.data(), forged.size()));
  spdlog::memory_buf_t out;
  formatter->format(msg, out);
  const std::string line(out.data(), out.size());
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;  // only the record's own end
  EXPECT_NE(line.find("(x)\\n2026-01-01"), std::string::npos) << line;
  EXPECT_NE(line.find("[kilnd "), std::string::npos) << line;
  EXPECT_NE(line.find(" info "), std::string::npos) << line;
  // The clone spdlog makes for each sink escapes too.
  spdlog::memory_buf_t again;
  formatter->clone()->format(msg, again);
  EXPECT_EQ(std::string(again.data(), again.size()).find('\n'), again.size() - 1);
}

}  // namespace
}  // namespace kiln::server
