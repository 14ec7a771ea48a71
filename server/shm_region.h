// A client's POSIX shared-memory region mapped into the daemon, and the
// bounds checks every tensor descriptor goes through.
//
// The client creates /dev/shm/<name>, registers it, and may unlink it right
// away: the daemon's mapping keeps the memory alive until the region is
// unregistered or the session closes. Not copyable; thread-safe for
// concurrent Resolve() calls (the mapping is immutable).
//
// The client may still shrink the object under the mapping: the access
// that then faults does not kill the daemon (client_memory_guard.h) but
// breaks the region for good. Whoever read or wrote a region asks Check()
// when done and fails the call with the status it returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

inline constexpr uint64_t kMaxRegionBytes = uint64_t{64} << 30;

class ShmRegion {
 public:
  // Maps /dev/shm/<name>. INVALID_ARGUMENT for a name outside the
  // "kiln-[A-Za-z0-9_-]+" pattern, a size larger than the object or
  // kMaxRegionBytes; PERMISSION_DENIED for an object owned by another user
  // or open to other users (clients create them 0600); NOT_FOUND when it
  // does not exist.
  static absl::StatusOr<std::unique_ptr<ShmRegion>> Open(const std::string& name,
                                                         uint64_t byte_size);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  // Pointer to [offset, offset + bytes) when it lies inside the region
  // (overflow-safe), else INVALID_ARGUMENT with the numbers; Check()'s
  // status once the region is broken.
  absl::StatusOr<uint8_t*> Resolve(uint64_t offset, uint64_t bytes) const;

  // OK while every access so far reached the client's object; else
  // INVALID_ARGUMENT saying it was truncated (or /dev/shm is full): what
  // was read since is zeros and what was written went nowhere.
  absl::Status Check() const;
  bool broken() const;

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // The object mapped (st_dev, st_ino): two regions of one object share it.
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }
  // Registered as a block a call's output is handed out in
  // (RegisterRegionRequest.output_block); set before the region is shared.
  bool output_block() const { return output_block_; }
  void set_output_block(bool output_block) { output_block_ = output_block; }

 private:
  ShmRegion(std::string name, uint8_t* base, uint64_t size, size_t guard_slot, uint64_t device,
            uint64_t inode)
      : name_(std::move(name)),
        base_(base),
        size_(size),
        guard_slot_(guard_slot),
        device_(device),
        inode_(inode) {}

  std::string name_;
  uint8_t* base_;
  uint64_t size_;
  size_t guard_slot_;
  uint64_t device_;
  uint64_t inode_;
  bool output_block_ = false;
};

bool IsValidRegionName(const std::string& name);

// Removes the objects "kiln-<pid>-..." in `dir` (/dev/shm) that a dead
// client left: ours, older than `min_age_s` (a live client unlinks its
// objects as soon as the daemon has mapped them, within milliseconds) and
// whose pid no longer exists. Returns how many were removed.
int RemoveStaleRegions(const std::string& dir, int min_age_s);

}  // namespace kiln::server
