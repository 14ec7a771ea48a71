#include "cache/cache_key.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/cache_dir.h"

namespace kiln::cache {
namespace {

constexpr size_t kFileBytes = 2 * sizeof(CacheKey) + 1;  // hex digits and '\n'

absl::Status Published(int dir, const std::string& name, const std::string& path) {
  CacheKey key;
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return absl::InternalError("no random bytes for a new cache key");
  }
  const std::string text = DigestHex(key) + "\n";
  // A name of this daemon's own (O_EXCL makes sure of it), nothing of the
  // key in it: others may list the directory.
  uint32_t tag = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&tag), sizeof(tag));
  const std::string tmp = absl::StrCat(name, ".tmp.", ::getpid(), ".", tag);
  FileDescriptor fd(::openat(dir, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             0600));
  if (fd.get() < 0) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  const bool written = WriteAll(fd.get(), text.data(), text.size()) && ::fsync(fd.get()) == 0;
  const int err = errno;
  absl::Status status = absl::OkStatus();
  if (!written) {
    status = absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(err)));
  } else if (::linkat(dir, tmp.c_str(), dir, name.c_str(), 0) != 0 && errno != EEXIST) {
    // EEXIST: another daemon published its key first; that one is read.
    status = absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  ::unlinkat(dir, tmp.c_str(), 0);
  return status;
}

}  // namespace

absl::StatusOr<CacheKey> LoadOrCreateCacheKey(int dir, const std::string& name,
                                              const std::string& path) {
  absl::StatusOr<CacheEntry> entry = OpenCacheEntry(dir, name, path);
  if (absl::IsNotFound(entry.status())) {
    if (absl::Status created = Published(dir, name, path); !created.ok()) return created;
  }
  return ReadCacheKey(dir, name, path);
}

absl::StatusOr<CacheKey> ReadCacheKey(int dir, const std::string& name, const std::string& path) {
  absl::StatusOr<CacheEntry> entry = OpenCacheEntry(dir, name, path);
  if (absl::IsDataLoss(entry.status())) {
    return absl::DataLossError(
        absl::StrCat(path, " cannot be used (", entry.status().message(), ")"));
  }
  if (!entry.ok()) return entry.status();
  if ((entry->st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s may be read by others (mode %04o, not 0600)", path, entry->st.st_mode & 07777));
  }
  if (static_cast<uint64_t>(entry->st.st_size) != kFileBytes) {
    return absl::DataLossError(absl::StrCat(path, " is not a key (", entry->st.st_size,
                                            " bytes, not ", kFileBytes, ")"));
  }
  std::string text(kFileBytes, '\0');
  if (absl::Status read = ReadExactly(entry->fd.get(), 0, text.data(), text.size(), path);
      !read.ok()) {
    return read;
  }
  CacheKey key;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 0; i < key.size(); ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::DataLossError(absl::StrCat(path, " is not a key (not 64 hex digits)"));
    }
    key[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  if (text.back() != '\n') {
    return absl::DataLossError(absl::StrCat(path, " is not a key (no newline after the digits)"));
  }
  return key;
}

absl::StatusOr<CacheKey> ReadKeyFile(const std::string& path) {
  // Followed through links (a Kubernetes Secret's file is one), opened
  // without blocking (a FIFO in its place is refused, not waited on).
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        path, " belongs to uid ", st.st_uid, ", not to kilnd's uid ", ::geteuid(), " or root"));
  }
  // Nobody but its owner (and its group, a Secret's fsGroup) may read it,
  // and nobody but its owner write it.
  if ((st.st_mode & 027) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s may be read by others or written by its group (mode %04o; 0600 or 0440)", path,
        st.st_mode & 07777));
  }
  char text[66] = {};
  const ssize_t n = ::read(fd.get(), text, sizeof(text));
  size_t digits = n == 65 && text[64] == '\n' ? 64 : static_cast<size_t>(n);
  CacheKey key;
  if (digits != 64) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a key (64 hex digits and an optional newline)"));
  }
  for (size_t i = 0; i < key.size(); ++i) {
    int v = 0;
    for (char c : {text[2 * i], text[2 * i + 1]}) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " is not a key (64 lowercase hex digits)"));
      }
      v = v << 4 | d;
    }
    key[i] = static_cast<uint8_t>(v);
  }
  return key;
}

}  // namespace kiln::cache
