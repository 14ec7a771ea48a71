// Opening the cache directory's directories and files as untrusted input.
//
// The cache directory is shared by every process of the daemon's user (other
// daemons, clients, `kiln cache`), so anything in it may have been put there
// by someone else: a FIFO that blocks a reader forever, a symbolic link to
// /dev/zero that never ends, a file larger than its header says, a file
// another user can rewrite. These helpers open nothing through a symbolic
// link, never block on open, accept only regular files and directories of
// the daemon's user that nobody else may write, and read exactly the bytes
// asked for.
//
// Status codes: PERMISSION_DENIED when a directory could be written by
// someone other than the daemon's user (nothing in it can be trusted: the
// caller refuses the whole cache); NOT_FOUND when there is nothing at the
// name; DATA_LOSS when there is something that is not a usable entry (the
// caller removes it and treats it as a miss; OpenCacheEntry's message is
// the reason alone, for the caller's "<path> rejected (<reason>)");
// INTERNAL for other system errors. Other messages name the path.
//
// Stateless and thread-safe.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::cache {

// An open file descriptor, closed when this goes away.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor();
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Mode of the directories the cache creates: others may read (as with any
// file of the user's), only the user writes.
inline constexpr mode_t kCacheDirectoryMode = 0755;

// OK when `st` (of `path`) is a directory of the daemon's effective user
// that neither its group nor others may write; PERMISSION_DENIED saying
// which of these fails otherwise.
absl::Status CheckCacheDirectory(const struct stat& st, const std::string& path);

// Opens and checks the cache's root directory at `path`, creating it (and
// its parents) first when `create`. The path itself may go through
// symbolic links (it is the operator's choice); the directory it names is
// checked.
absl::StatusOr<FileDescriptor> OpenCacheRoot(const std::string& path, bool create);

// Opens and checks the directory `name` in the directory `parent` (shown
// in messages as `path`), creating it when `create`. Never through a
// symbolic link: one is PERMISSION_DENIED, as is any other directory that
// fails CheckCacheDirectory. Something else at the name is DATA_LOSS.
absl::StatusOr<FileDescriptor> OpenCacheSubdirectory(int parent, const std::string& name,
                                                     const std::string& path, bool create);

// An entry opened for reading, and what fstat said of it then.
struct CacheEntry {
  FileDescriptor fd;
  struct stat st;
};

// Opens the entry `name` in the directory `dir` (shown as `path`) for
// reading: never through a symbolic link, never blocking (a FIFO is opened
// and refused, not waited on), and only a regular file of the daemon's
// effective user that its user may read and nobody else may write (checked
// on the mode bits, so a daemon running as root refuses the same files a
// user's daemon could not open). DATA_LOSS with the reason otherwise.
absl::StatusOr<CacheEntry> OpenCacheEntry(int dir, const std::string& name,
                                          const std::string& path);

// Reads exactly `size` bytes at `offset` of `fd` into `out`; DATA_LOSS if
// the file ends first (it was truncated since its size was looked at).
absl::Status ReadExactly(int fd, uint64_t offset, void* out, size_t size,
                         const std::string& path);

// Writes all `size` bytes of `data` to `fd`, going on after a short write
// or a signal; false (errno says why) if the file takes no more.
bool WriteAll(int fd, const void* data, size_t size);

}  // namespace kiln::cache
