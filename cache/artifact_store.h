// On-disk store of compiled-graph artifacts, content-addressed by graph key
// (cache/graph_key.h).
//
// Entry file: <dir>/artifacts/<key[0:2]>/<key>.kart =
//   magic "KILNART\0" | u32 format version | u32 len + compiler version |
//   u32 len + CPU features | u64 payload size | 64 hex chars SHA-256 of the
//   payload | 12-byte nonce | 16-byte GMAC tag | payload
// The tag is a GMAC under the directory's key (cache/cache_key.h, the key
// derived constants are saved under) of the graph key, compiler version,
// CPU features, size and payload: a payload holds the graph the compiler
// made, which a hit runs without compiling, so only a daemon holding the
// key may have written it. A wrong magic, version, feature string, size,
// checksum or tag is a miss; the bad entry is deleted and logged, never
// trusted. Writes go to a temporary
// file in the same directory and are renamed into place, so readers (other
// daemons on the same directory included) see a whole entry or none.
//
// Size cap: entries (their file sizes, and those of the constants saved
// beside them, constants/<xx>/<name>.kcst) are kept under `max_bytes` by
// deleting the least recently used ones after a Store goes over it. The LRU
// clock is each entry's mtime, which a successful Load sets to now: several
// daemons may share the directory, so the recency has to live in the
// filesystem, and atime is often disabled (noatime/relatime). The running
// total is kept in memory from one scan at construction plus this store's
// own writes; other daemons' writes are only seen when that figure says the
// cap is exceeded and the directory is scanned again before evicting. A scan
// also removes writers' temporaries older than an hour (left by a crash).
//
// The directory is input too (cache/cache_dir.h): the root and every
// directory under it that the store uses must belong to the daemon's user
// and be writable by nobody else, or the store refuses the directory
// (disables itself, saying why once), at start or whenever it comes upon
// one. Entries are opened without following symbolic links or blocking,
// only as regular files of the daemon's user, and read up to the size
// their header gives, which must be the file's.
//
// Thread-safe. When the directory cannot be created or written, or is
// refused, the store disables itself, logs once, and every call becomes a
// miss / no-op.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/cache_dir.h"
#include "cache/cache_key.h"

namespace kiln::cache {

// 2: the payload holds the optimized graph, and the header a MAC.
inline constexpr uint32_t kArtifactFormatVersion = 2;
// Default cap on the total size of entries: 2 GiB.
inline constexpr uint64_t kDefaultArtifactCacheMaxBytes = uint64_t{2} << 30;

class ArtifactStore {
 public:
  // An empty `dir` gives a disabled store. `max_bytes` 0 means no cap.
  // Reads the directory's key (cache/cache_key.h), creating it if there is
  // none; a key file that is not a key of the daemon's user closed to
  // others refuses the directory.
  explicit ArtifactStore(std::string dir,
                         uint64_t max_bytes = kDefaultArtifactCacheMaxBytes);

  bool enabled() const { return enabled_.load(); }
  // The directory's key (cache/cache_key.h), loaded or created at
  // construction; set whenever the store was ever enabled.
  const std::optional<CacheKey>& key() const { return key_; }
  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }

  // The payload stored under `key`, or nullopt (miss or bad entry). A hit
  // marks the entry most recently used. `for_export` (a cache archive
  // reading the directory): no entry is marked used, and an entry of
  // another compiler or CPU is skipped rather than deleted.
  std::optional<std::string> Load(const std::string& key, bool for_export = false);
  // Stores `payload` under `key`, then evicts least recently used entries
  // (never this one) if the cap is exceeded. Failures are logged, not
  // returned: the cache is an optimization and must never fail a compile.
  void Store(const std::string& key, const std::string& payload);

  std::string PathFor(const std::string& key) const;

  // The directory <dir>/<kind>/<shard> (kind "artifacts" or "constants",
  // shard two hex digits), checked at every level and created when
  // `create`. A directory someone else could write disables the store
  // (PERMISSION_DENIED); NOT_FOUND when absent and not created.
  absl::StatusOr<FileDescriptor> OpenShard(const char* kind, const std::string& shard,
                                           bool create);
  // The root directory, checked.
  absl::StatusOr<FileDescriptor> OpenRoot();

  // Turns the store off for good and logs `why` once (with what it means:
  // compiling without caching).
  void Disable(const std::string& why);

  // Another file in the cache directory counted against the cap with the
  // entries (cache/constant_files.h): `bytes` were just written at `path`,
  // or `bytes` were just removed.
  void Added(const std::string& path, uint64_t bytes);
  void Forget(uint64_t bytes);

  // A file of the store's, as a scan found it.
  struct StoredFile {
    std::string path;
    uint64_t size;
    int64_t mtime_s;  // its last use
  };
  // The entries (`kind` "artifacts") or the saved constants ("constants")
  // in the directory now, other daemons' included; none when disabled.
  std::vector<StoredFile> List(const char* kind);

  // Total size of entries as this store last counted it (see above).
  uint64_t total_bytes() const;
  // Recounts the directory (other daemons' writes included) and removes
  // stale temporaries; returns the new total.
  uint64_t Rescan();

 private:
  struct ScanResult;
  // Callers hold mu_, so one scan (and its removals) runs at a time.
  ScanResult Scan() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScanKind(const char* subdir, const std::string& suffix, ScanResult* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictIfOver(const std::string& keep_path) ABSL_LOCKS_EXCLUDED(mu_);
  // Every directory of the tree as CheckCacheDirectory wants it; the first
  // that is not, or OK.
  absl::Status CheckTree(int root);

  std::string dir_;
  const uint64_t max_bytes_;
  std::optional<CacheKey> key_;  // set once, at construction
  std::atomic<bool> enabled_{false};
  std::atomic<bool> warned_{false};
  // Serializes scans and evictions, so two threads never evict together.
  mutable absl::Mutex mu_;
  uint64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::cache
