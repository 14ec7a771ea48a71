#include "server/process_watch.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kiln::server {

uint64_t OwnPidNamespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
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
