// kilnd's text log lines (the default --log-format): "<time> [kilnd <pid>]
// <level> <message>", one record per line whatever the message holds.
//
// Messages quote what clients send (a client's name, a graph's node names,
// a region's name, error details), and a client could put a newline and a
// forged log line in any of them. So the message is escaped: control
// characters become \n, \r, \t or \xNN, a backslash becomes \\ (so an
// escape in the log always means an escaped byte), and bytes that are not
// UTF-8 become \xNN. The JSON format escapes for JSON instead
// (json_log_formatter.h).
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"

namespace kiln::server {

// Appends `text` to `out`, escaped as above.
void AppendLogEscaped(absl::string_view text, std::string* out);

// The formatter of the text log: spdlog's pattern with the message escaped.
std::unique_ptr<spdlog::formatter> MakeTextLogFormatter();

}  // namespace kiln::server
