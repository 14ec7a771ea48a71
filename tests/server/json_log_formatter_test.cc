// --log-format json: every record one line that a JSON parser reads back
// (protobuf's, into a Struct), with the message exactly as logged however
// it was escaped.
#include "server/json_log_formatter.h"

#include <unistd.h>

#include <chrono>
#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spdlog/details/log_msg.h"

namespace kiln::server {
namespace {

std::string Format(spdlog::level::level_enum level, const std::string& payload,
                   std::chrono::system_clock::time_point time = std::chrono::system_clock::now()) {
  JsonLogFormatter formatter;
  spdlog::details::log_msg msg(time, spdlog::source_loc{}, "kilnd", level, payload);
  spdlog::memory_buf_t buf;
  formatter.format(msg, buf);
  return std::string(buf.data(), buf.size());
}

google::protobuf::Struct Parse(const std::string& line) {
  google::protobuf::Struct parsed;
  auto status = google::protobuf::util::JsonStringToMessage(line, &parsed);
  EXPECT_TRUE(status.ok()) << status.ToString() << " in " << line;
  return parsed;
}

TEST(JsonLogFormatterTest, OneObjectPerLineWithTimeLevelPidLoggerMsg) {
  // 2024-05-01 12:34:56.789 UTC
  const auto time = std::chrono::system_clock::time_point(std::chrono::milliseconds(1714566896789));
  const std::string line = Format(spdlog::level::warn, "cache is full", time);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  const auto parsed = Parse(line);
  const auto& f = parsed.fields();
  EXPECT_EQ(f.at("time").string_value(), "2024-05-01T12:34:56.789Z");
  EXPECT_EQ(f.at("level").string_value(), "warning");
  EXPECT_EQ(f.at("pid").number_value(), getpid());
  EXPECT_EQ(f.at("logger").string_value(), "kilnd");
  EXPECT_EQ(f.at("msg").string_value(), "cache is full");
}

TEST(JsonLogFormatterTest, MessagesWithQuotesBackslashesAndControlCharactersRoundTrip) {
  const std::string nasty = std::string("node \"conv\\1\"\nline two\ttab\r\b\f") + '\x01' +
                            '\x1f' + "\x7f" + "snowman \xE2\x98\x83 and \xF0\x9F\x94\xA5";
  const std::string line = Format(spdlog::level::info, nasty);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << line;
  EXPECT_NE(line.find("\\u0001"), std::string::npos);
  EXPECT_NE(line.find("\\\"conv\\\\1\\\""), std::string::npos);
  EXPECT_EQ(Parse(line).fields().at("msg").string_value(), nasty);
}

TEST(JsonLogFormatterTest, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  // A lone continuation byte, a truncated sequence, an overlong '/', a
  // UTF-16 surrogate: each becomes U+FFFD and the line still parses.
  const std::string bad = std::string("a\x80") + "b\xE2\x98" + "c\xC0\xAF" + "d\xED\xA0\x80";
  const std::string line = Format(spdlog::level::err, bad);
  const std::string msg = Parse(line).fields().at("msg").string_value();
  EXPECT_EQ(msg.substr(0, 1), "a");
  EXPECT_NE(msg.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_NE(msg.find("b"), std::string::npos);
  EXPECT_NE(msg.find("d"), std::string::npos);
}

TEST(JsonLogFormatterTest, EscapingOfPlainTextIsTheIdentity) {
  std::string out;
  AppendJsonEscaped("kilnd 1.0 ready on unix:/tmp/k.sock (2 threads)", &out);
  EXPECT_EQ(out, "kilnd 1.0 ready on unix:/tmp/k.sock (2 threads)");
  out.clear();
  AppendJsonEscaped(std::string("\0x", 2), &out);
  EXPECT_EQ(out, "\\u0000x");
}

}  // namespace
}  // namespace kiln::server
