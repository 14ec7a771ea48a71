#include "cache/cache_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::cache {
namespace {

std::string Mode(mode_t mode) { return absl::StrFormat("%04o", mode & 07777); }

absl::Status Errno(const std::string& what, const std::string& path, int err) {
  return absl::InternalError(absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(err)));
}

// What is at a name instead of a directory or regular file, for messages.
const char* KindOf(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISREG(mode)) return "a regular file";
  return "of an unknown kind";
}

}  // namespace

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

absl::Status CheckCacheDirectory(const struct stat& st, const std::string& path) {
  if (!S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(path, " is ", KindOf(st.st_mode)));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(path, " belongs to uid ", st.st_uid,
                                                    ", not to kilnd's uid ", ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " is writable by its group or others (mode ", Mode(st.st_mode), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDescriptor> OpenCacheRoot(const std::string& path, bool create) {
  if (create) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec) return Errno("create", parent.string(), ec.value());
    // The mode given here, not the umask's default: a group-writable
    // directory would be refused below.
    if (::mkdir(path.c_str(), kCacheDirectoryMode) != 0 && errno != EEXIST) {
      return Errno("create", path, errno);
    }
  }
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return Errno("open", path, errno);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("stat", path, errno);
  if (absl::Status ok = CheckCacheDirectory(st, path); !ok.ok()) return ok;
  return fd;
}

absl::StatusOr<FileDescriptor> OpenCacheSubdirectory(int parent, const std::string& name,
                                                     const std::string& path, bool create) {
  if (create && ::mkdirat(parent, name.c_str(), kCacheDirectoryMode) != 0 && errno != EEXIST) {
    return Errno("create", path, errno);
  }
  FileDescriptor fd(
      ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    // ELOOP (a symbolic link) or ENOTDIR (anything else): say which.
    struct stat st;
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      if (S_ISLNK(st.st_mode)) {
        return absl::PermissionDeniedError(absl::StrCat(path, " is a symbolic link"));
      }
      if (!S_ISDIR(st.st_mode)) {
        return absl::DataLossError(absl::StrCat(path, " is ", KindOf(st.st_mode)));
      }
    }
    return Errno("open", path, err);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno("stat", path, errno);
  if (absl::Status ok = CheckCacheDirectory(st, path); !ok.ok()) return ok;
  return fd;
}

absl::StatusOr<CacheEntry> OpenCacheEntry(int dir, const std::string& name,
                                          const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer, forever. Reads of a regular file ignore the flag.
  CacheEntry entry;
  entry.fd = FileDescriptor(
      ::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (entry.fd.get() < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    if (err == ELOOP) return absl::DataLossError("a symbolic link");
    if (err == EACCES) return absl::DataLossError("not readable by kilnd's user");
    return Errno("open", path, err);
  }
  if (::fstat(entry.fd.get(), &entry.st) != 0) return Errno("stat", path, errno);
  const struct stat& st = entry.st;
  if (!S_ISREG(st.st_mode)) return absl::DataLossError(KindOf(st.st_mode));
  if (st.st_uid != ::geteuid()) {
    return absl::DataLossError(absl::StrCat("belongs to uid ", st.st_uid, ", not to kilnd's uid ",
                                            ::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || (st.st_mode & S_IRUSR) == 0) {
    return absl::DataLossError(absl::StrCat("mode ", Mode(st.st_mode)));
  }
  return entry;
}

absl::Status ReadExactly(int fd, uint64_t offset, void* out, size_t size,
                         const std::string& path) {
  auto* p = static_cast<uint8_t*>(out);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno("read", path, errno);
    if (n == 0) return absl::DataLossError("shorter than its header says");
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace kiln::cache
