// kilnd's --log-format json: each log record as one JSON object on one line,
// {"time": "2024-05-01T12:34:56.789Z", "level": "info", "pid": 123,
//  "logger": "kilnd", "msg": "..."}, for log collectors that parse lines.
//
// The line is written by nlohmann-json (Debian's nlohmann-json3-dev), which
// escapes the message whatever it holds: quotes, backslashes and control
// characters (a message may quote a client's graph or file names), and
// bytes that are not UTF-8 become U+FFFD, so every line parses.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"

namespace kiln::server {

// Appends `text` to `out` as the inside of a JSON string, escaped as above.
void AppendJsonEscaped(absl::string_view text, std::string* out);

class JsonLogFormatter final : public spdlog::formatter {
 public:
  JsonLogFormatter();
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;

 private:
  const int pid_;
};

}  // namespace kiln::server
