#include "server/config_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

// An unquoted value ends where a comment starts: a '#' at its start or
// after whitespace ("a#b" stays whole, so does a path with a '#').
absl::string_view StripTrailingComment(absl::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '#' &&
        (i == 0 || absl::ascii_isspace(static_cast<unsigned char>(value[i - 1])))) {
      return value.substr(0, i);
    }
  }
  return value;
}

// `value` starts with '"'. The unescaped text between the quotes, or an
// error message.
absl::StatusOr<std::string> Unquote(absl::string_view value) {
  std::string out;
  size_t i = 1;
  for (; i < value.size() && value[i] != '"'; ++i) {
    if (value[i] == '\\' && i + 1 < value.size() && (value[i + 1] == '"' || value[i + 1] == '\\')) {
      ++i;
    }
    out.push_back(value[i]);
  }
  if (i >= value.size()) return absl::InvalidArgumentError("unterminated quoted value");
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(value.substr(i + 1));
  if (!rest.empty() && rest[0] != '#') {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected '", rest, "' after the quoted value"));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view path) {
  std::vector<ConfigEntry> entries;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", number, ": ", why));
    };
    line = absl::StripAsciiWhitespace(line);  // also a CR of a CRLF file
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return fail(absl::StrCat("expected 'key = value', not '", line, "'"));
    }
    ConfigEntry entry;
    entry.line = number;
    entry.key = std::string(absl::StripAsciiWhitespace(line.substr(0, eq)));
    if (entry.key.empty()) return fail("missing key before '='");
    absl::string_view value = absl::StripLeadingAsciiWhitespace(line.substr(eq + 1));
    if (!value.empty() && value[0] == '"') {
      absl::StatusOr<std::string> unquoted = Unquote(value);
      if (!unquoted.ok()) return fail(unquoted.status().message());
      entry.value = *std::move(unquoted);
    } else {
      entry.value = std::string(absl::StripTrailingAsciiWhitespace(StripTrailingComment(value)));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::vector<ConfigEntry>> ReadConfigFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    std::string msg = absl::StrCat("cannot read config file ", path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxConfigFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("config file ", path, " is larger than ",
                                                   kMaxConfigFileBytes, " bytes"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot read config file ", path, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return ParseConfigText(text.str(), path);
}

}  // namespace kiln::server
