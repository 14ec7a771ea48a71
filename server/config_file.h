// kilnd's config file (--config / KILN_CONFIG_FILE), read into key/value
// entries. What a key means is daemon_config.cc's business: each entry is
// applied as the long flag of the same name, so a value is parsed by the
// same code as on the command line.
//
// Format, one setting per line:
//   # a comment (also after an unquoted value, past whitespace)
//   cache-max-mb = 4096
//   log-file = "/var/log/kiln/kilnd.log"   # quoted: kept as written
// Blank lines are skipped; whitespace around keys and values is dropped. In
// a double-quoted value \" is a quote and \\ a backslash; nothing but
// whitespace or a comment may follow the closing quote.
//
// The parser is ours because no library in Debian 12 reads this documented
// format, and a format change would break the files users have: in TOML
// (libtomlplusplus-dev, libtoml11-dev) `log-level = info` and unquoted
// paths are errors; inih (libinih-dev, built with its defaults) has no
// quoting, takes ';' as a comment, joins an indented line to the previous
// value, cuts lines at 200 bytes and cannot give an entry's line number;
// abseil's --flagfile takes `--flag=value` lines for flags declared with
// ABSL_FLAG and parsed by absl::ParseCommandLine, which kilnd's one flag
// table (daemon_config.cc) is not.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::server {

struct ConfigEntry {
  int line = 0;  // 1-based
  std::string key;
  std::string value;
};

// Config files are a few dozen lines; a bigger file is a mistake (the
// wrong path), not a config.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// INVALID_ARGUMENT "<path>:<line>: ..." for a line that is not `key = value`
// (no '=', an empty key, an unterminated quote, text after a closing quote).
[[nodiscard]] absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                                       absl::string_view path);
// ParseConfigText of the file's contents; NOT_FOUND / PERMISSION_DENIED /
// INVALID_ARGUMENT (too big, not a regular file) naming the path.
[[nodiscard]] absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

}  // namespace kiln::server
