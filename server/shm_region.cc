#include "server/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/util/status_macros.h"
#include "server/client_memory_guard.h"

namespace kiln::server {

bool IsValidRegionName(const std::string& name) {
  constexpr char kPrefix[] = "kiln-";
  if (name.size() <= sizeof(kPrefix) - 1 || name.size() > 200) return false;
  if (name.compare(0, sizeof(kPrefix) - 1, kPrefix) != 0) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<ShmRegion>> ShmRegion::Open(const std::string& name,
                                                           uint64_t byte_size) {
  if (!IsValidRegionName(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region name '", name, "' must be 'kiln-' followed by letters, digits, '-' or '_'"));
  }
  if (byte_size == 0 || byte_size > kMaxRegionBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region size ", byte_size, " must be between 1 and ", kMaxRegionBytes));
  }
  const std::string path = "/" + name;
  int fd = shm_open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    // Not NOT_FOUND: clients take that for state a restarted daemon forgot
    // and reconnect, while this one is about where the two processes run.
    if (err == ENOENT) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no shared memory object /dev/shm/", name,
          " where kilnd runs: the client and kilnd must share /dev/shm (same host and IPC "
          "namespace; docs/troubleshooting.md)"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open /dev/shm/", name, ": ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("fstat /dev/shm/", name, " failed"));
  }
  if (st.st_uid != geteuid()) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat("/dev/shm/", name, " belongs to another user"));
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        "/dev/shm/", name, " is open to other users (mode ", absl::StrFormat("%04o", st.st_mode & 0777),
        "); create regions with mode 0600"));
  }
  if (static_cast<uint64_t>(st.st_size) < byte_size) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "region '", name, "' claims ", byte_size, " bytes but the object has ", st.st_size));
  }
  void* base = mmap(nullptr, byte_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", byte_size, " bytes of ", name, ": ", std::strerror(errno)));
  }
  // Guarded from here on: the object may shrink at any time, this instant
  // included (the size checked above is only what it was then).
  absl::StatusOr<size_t> slot = RegisterGuardedMapping(base, byte_size);
  if (!slot.ok()) {
    munmap(base, byte_size);
    return slot.status();
  }
  return std::unique_ptr<ShmRegion>(
      new ShmRegion(name, static_cast<uint8_t*>(base), byte_size, *slot, st.st_dev, st.st_ino));
}

ShmRegion::~ShmRegion() {
  UnregisterGuardedMapping(guard_slot_);
  munmap(base_, size_);
}

bool ShmRegion::broken() const { return GuardedMappingBroken(guard_slot_); }

absl::Status ShmRegion::Check() const {
  if (!broken()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "shared memory region '", name_, "' shrank while the daemon used it (truncated, or a "
      "sparse object on a full /dev/shm): the call's data is lost and the region is unusable; "
      "unregister it"));
}

absl::StatusOr<uint8_t*> ShmRegion::Resolve(uint64_t offset, uint64_t bytes) const {
  KILN_RETURN_IF_ERROR(Check());
  // offset + bytes may overflow: compare against what is left instead.
  if (offset > size_ || bytes > size_ - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "descriptor [", offset, ", +", bytes, ") reaches past the end of region '",
        name_, "' (", size_, " bytes)"));
  }
  return base_ + offset;
}

int RemoveStaleRegions(const std::string& dir, int min_age_s) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int removed = 0;
  const uid_t uid = geteuid();
  const time_t now = time(nullptr);
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!IsValidRegionName(name)) continue;
    const size_t dash = name.find('-', 5);
    int pid = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(5, dash - 5), &pid) ||
        pid <= 0) {
      continue;
    }
    struct stat st {};
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
        now - st.st_mtime < min_age_s) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // still there (or not ours to ask)
    removed += unlink(entry.path().c_str()) == 0 ? 1 : 0;
  }
  return removed;
}

}  // namespace kiln::server
