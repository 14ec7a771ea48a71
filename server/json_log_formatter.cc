#include "server/json_log_formatter.h"

#include <unistd.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kiln::server {
namespace {

// Bytes that are not UTF-8 become U+FFFD instead of failing the dump.
std::string Dump(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void AppendJsonEscaped(absl::string_view text, std::string* out) {
  const std::string quoted = Dump(std::string(text));
  out->append(quoted, 1, quoted.size() - 2);
}

JsonLogFormatter::JsonLogFormatter() : pid_(static_cast<int>(getpid())) {}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  nlohmann::ordered_json record;
  record["time"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromChrono(msg.time), absl::UTCTimeZone());
  record["level"] = std::string(level.data(), level.size());
  record["pid"] = pid_;
  record["logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
  record["msg"] = std::string(msg.payload.data(), msg.payload.size());
  const std::string line = Dump(record) + "\n";
  dest.append(line.data(), line.data() + line.size());
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace kiln::server
