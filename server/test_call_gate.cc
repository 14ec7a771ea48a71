#include "server/test_call_gate.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "spdlog/spdlog.h"

namespace kiln::server {

void TestCallGate::Pass() const {
  int fd;
  do {
    fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    spdlog::warn("--test-call-gate: cannot open {}: {}", path_, std::strerror(errno));
    return;
  }
  char byte;
  ssize_t n;
  do {
    n = read(fd, &byte, 1);
  } while (n < 0 && errno == EINTR);
  close(fd);
}

}  // namespace kiln::server
