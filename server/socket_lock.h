// The daemon's claim on its socket path: a 0700 directory owned by this
// user, and an exclusive flock on <socket>.lock held for the daemon's life,
// so a second daemon fails loudly instead of stealing the socket.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

class SocketLock {
 public:
  // Creates the directory (0700) if needed, refuses one owned by another
  // user or open to others, takes the lock (ALREADY_EXISTS when another
  // daemon holds it) and removes a stale socket file left by a dead daemon.
  static absl::StatusOr<SocketLock> Acquire(const std::string& socket_path);

  SocketLock(SocketLock&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  SocketLock& operator=(SocketLock&&) = delete;
  ~SocketLock();

  // Removes the socket and lock files; the lock itself goes with the fd.
  void Release();

 private:
  SocketLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_ = -1;
};

}  // namespace kiln::server
