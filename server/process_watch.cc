#include "server/process_watch.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {

uint64_t OwnPidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

absl::StatusOr<uint64_t> PidNamespaceOf(int pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process"));
  const std::string path = absl::StrCat("/proc/", pid, "/ns/pid");
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string why = absl::StrCat("cannot read ", path, ": ", std::strerror(err));
    if (err == ENOENT || err == ESRCH) return absl::NotFoundError(why);
    return absl::PermissionDeniedError(why);
  }
  return static_cast<uint64_t>(st.st_ino);
}

absl::StatusOr<std::vector<int>> NamespacePids(int pid) {
  if (pid <= 0) return absl::InvalidArgumentError(absl::StrCat("pid ", pid, " is not a process"));
  const std::string path = absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::string line;
  while (std::getline(in, line)) {
    constexpr std::string_view kKey = "NSpid:";
    if (line.compare(0, kKey.size(), kKey) != 0) continue;
    std::vector<int> pids;
    const std::string fields = line.substr(kKey.size());
    for (absl::string_view field :
         absl::StrSplit(fields, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      int p = 0;
      if (!absl::SimpleAtoi(field, &p) || p <= 0) return absl::DataLossError(
          absl::StrCat(path, ": cannot read its NSpid line '", line, "'"));
      pids.push_back(p);
    }
    if (pids.empty()) break;
    return pids;
  }
  return absl::NotFoundError(absl::StrCat(path, " has no NSpid line the daemon can read"));
}

std::optional<uint64_t> ProcessStartTicks(int pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces or
  // parentheses itself: fields are counted after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Fields 3.. follow; starttime is field 22, the 20th after the name.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
  }
  // A zombie has exited: its resources are gone even if the pid is not.
  std::istringstream state_field(line.substr(close + 1));
  std::string state;
  state_field >> state;
  if (state == "Z" || state == "X") return std::nullopt;
  try {
    return std::stoull(field);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace kiln::server
