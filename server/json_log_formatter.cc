#include "server/json_log_formatter.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

#include "absl/strings/str_format.h"
#include "server/utf8.h"

namespace kiln::server {

void AppendJsonEscaped(absl::string_view text, std::string* out) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(text, i);
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(text.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
}

JsonLogFormatter::JsonLogFormatter() : pid_(static_cast<int>(getpid())) {}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  using namespace std::chrono;
  const auto since_epoch = msg.time.time_since_epoch();
  const auto secs = duration_cast<seconds>(since_epoch);
  const int ms = static_cast<int>(duration_cast<milliseconds>(since_epoch - secs).count());
  const std::time_t t = static_cast<std::time_t>(secs.count());
  std::tm utc{};
  gmtime_r(&t, &utc);
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  std::string line = absl::StrFormat(
      "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\",\"level\":\"%s\",\"pid\":%d,\"logger\":\"",
      utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, ms,
      absl::string_view(level.data(), level.size()), pid_);
  AppendJsonEscaped(absl::string_view(msg.logger_name.data(), msg.logger_name.size()), &line);
  line.append("\",\"msg\":\"");
  AppendJsonEscaped(absl::string_view(msg.payload.data(), msg.payload.size()), &line);
  line.append("\"}\n");
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace kiln::server
