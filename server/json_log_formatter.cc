#include "server/json_log_formatter.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

// The length of the valid UTF-8 sequence starting at s[i], or 0 when the
// bytes there are not one (overlong forms, surrogates and values past
// U+10FFFF included).
size_t Utf8Length(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b = byte(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return n;
}

}  // namespace

void AppendJsonEscaped(absl::string_view text, std::string* out) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(text, i);
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
