#include "server/socket_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {

absl::StatusOr<SocketLock> SocketLock::Acquire(const std::string& socket_path) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(socket_path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    if (!fs::exists(dir)) {
      fs::create_directories(dir.parent_path(), ec);
      if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        return absl::PermissionDeniedError(
            absl::StrCat("cannot create ", dir.string(), ": ", std::strerror(errno)));
      }
    }
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot stat ", dir.string()));
    }
    if (st.st_uid != geteuid()) {
      return absl::PermissionDeniedError(absl::StrCat(
          dir.string(), " belongs to uid ", st.st_uid, "; the socket directory must be ours"));
    }
    // Never tightened in place: a directory of ours that others may use
    // (/tmp itself, for a root daemon given --socket /tmp/kilnd.sock) is
    // theirs too, and taking it from them breaks everything else there.
    if ((st.st_mode & 077) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          dir.string(), " is open to other users (mode ",
          absl::StrFormat("%04o", st.st_mode & 07777),
          "); the socket needs a directory of its own with mode 0700"));
    }
  }
  const std::string lock_path = socket_path + ".lock";
  // Retry when the file we locked was unlinked by a daemon shutting down in
  // between: the lock must be on the inode the path names.
  for (int attempt = 0; attempt < 5; ++attempt) {
    int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      return absl::AlreadyExistsError(absl::StrCat(
          "another kilnd holds ", lock_path, " and serves ", socket_path));
    }
    struct stat by_fd {}, by_path {};
    if (fstat(fd, &by_fd) == 0 && stat(lock_path.c_str(), &by_path) == 0 &&
        by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev) {
      unlink(socket_path.c_str());  // stale socket of a dead daemon
      std::string pid = std::to_string(getpid()) + "\n";
      if (ftruncate(fd, 0) == 0) (void)!write(fd, pid.data(), pid.size());
      return SocketLock(socket_path, fd);
    }
    close(fd);
  }
  return absl::UnavailableError(absl::StrCat("could not take ", lock_path, " (contention)"));
}

void SocketLock::Release() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  unlink((path_ + ".lock").c_str());
  close(fd_);
  fd_ = -1;
}

SocketLock::~SocketLock() { Release(); }

}  // namespace kiln::server
