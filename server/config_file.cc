#include "server/config_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <toml++/toml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

// A value as the command line would give it, or an error message.
absl::StatusOr<std::string> CommandLineValue(const toml::node& node) {
  if (auto v = node.value_exact<std::string>()) return *v;
  if (auto v = node.value_exact<int64_t>()) return absl::StrCat(*v);
  if (auto v = node.value_exact<double>()) return absl::StrFormat("%.17g", *v);
  if (auto v = node.value_exact<bool>()) return std::string(*v ? "true" : "false");
  if (node.is_table()) {
    return absl::InvalidArgumentError(
        "is a table; settings are top-level keys (kilnd's long flag names)");
  }
  if (node.is_array()) return absl::InvalidArgumentError("is an array; a setting has one value");
  return absl::InvalidArgumentError("is a date or time; no setting takes one");
}

}  // namespace

absl::StatusOr<std::vector<ConfigEntry>> ParseConfigText(absl::string_view text,
                                                         absl::string_view path) {
  toml::table doc;
  try {
    doc = toml::parse(std::string_view(text.data(), text.size()),
                      std::string_view(path.data(), path.size()));
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", e.source().begin.line, ":", e.source().begin.column, ": ", std::string(e.description()),
        " (the config file is TOML: text values are quoted, as in log-level = \"info\")"));
  }
  // toml++ keeps a table's keys sorted; settings apply, and errors are
  // found, in the order of the file's lines.
  std::vector<std::pair<const toml::key*, const toml::node*>> keys;
  for (const auto& [key, node] : doc) keys.emplace_back(&key, &node);
  std::stable_sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) {
    return a.first->source().begin.line < b.first->source().begin.line;
  });
  std::vector<ConfigEntry> entries;
  for (const auto& [key, node] : keys) {
    ConfigEntry entry;
    entry.line = static_cast<int>(key->source().begin.line);
    entry.key = std::string(key->str());
    absl::StatusOr<std::string> value = CommandLineValue(*node);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", entry.line, ": '", entry.key, "' ", value.status().message()));
    }
    entry.value = *std::move(value);
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
