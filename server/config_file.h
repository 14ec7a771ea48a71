// kilnd's config file (--config / KILN_CONFIG_FILE): a TOML document
// (https://toml.io, read by toml++) whose top-level keys are kilnd's long
// flag names. What a key means is daemon_config.cc's business: each entry
// is applied as the long flag of the same name, so a value is checked by the
// same code as on the command line.
//
//   # comments run to the end of the line
//   cache-max-mb = 4096
//   log-level = "debug"                      # text is quoted
//   log-file = '/var/log/kiln/kilnd.log'     # literal string: no escapes
//   idle-exit-min = 0.5
//   no-cache = true
//
// A value is a string, an integer, a float or a boolean; tables and arrays
// set nothing and are refused, so a typo cannot hide in a section kilnd
// never reads.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::server {

struct ConfigEntry {
  int line = 0;  // 1-based, where the key is
  std::string key;
  std::string value;  // as a command-line value: true/false, decimal numbers, text
};

// Config files are a few dozen lines; a bigger file is a mistake (the
// wrong path), not a config.
inline constexpr size_t kMaxConfigFileBytes = 1 << 20;

// The document's settings in the order of their lines. INVALID_ARGUMENT
// "<path>:<line>:<column>: ..." for text that is not TOML (the parser's own
// description), and "<path>:<line>: ..." for a table or an array.
[[nodiscard]] absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                                       absl::string_view path);
// ParseConfigText of the file's contents; NOT_FOUND / PERMISSION_DENIED /
// INVALID_ARGUMENT (too big, not a regular file) naming the path.
[[nodiscard]] absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path);

}  // namespace kiln::server
