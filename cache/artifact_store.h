// On-disk store of compiled-graph artifacts, content-addressed by graph key
// (cache/graph_key.h).
//
// Entry file: <dir>/artifacts/<key[0:2]>/<key>.kart =
//   magic "KILNART\0" | u32 format version | u32 len + runtime version |
//   u32 len + CPU features | u64 payload size | 64 hex chars SHA-256 of the
//   payload | payload
// A wrong magic, version, feature string, size or checksum is a miss; the
// bad entry is deleted and logged, never trusted. Writes go to a temporary
// file in the same directory and are renamed into place, so readers (other
// daemons on the same directory included) see a whole entry or none.
//
// Thread-safe. When the directory cannot be created or written, the store
// disables itself, logs once, and every call becomes a miss / no-op.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace kiln::cache {

inline constexpr uint32_t kArtifactFormatVersion = 1;

class ArtifactStore {
 public:
  // An empty `dir` gives a disabled store.
  explicit ArtifactStore(std::string dir);

  bool enabled() const { return enabled_.load(); }
  const std::string& dir() const { return dir_; }

  // The payload stored under `key`, or nullopt (miss or bad entry).
  std::optional<std::string> Load(const std::string& key);
  // Stores `payload` under `key`; failures are logged, not returned: the
  // cache is an optimization and must never fail a compile.
  void Store(const std::string& key, const std::string& payload);

  std::string PathFor(const std::string& key) const;

 private:
  void Disable(const std::string& why);

  std::string dir_;
  std::atomic<bool> enabled_{false};
  std::atomic<bool> warned_{false};
};

}  // namespace kiln::cache
