// Constants kept in the cache directory, so a restarted daemon (or another
// daemon on the same directory) maps them instead of asking clients to
// upload weights again and deriving folded and packed weights again.
//
// Two kinds, one format: clients' constants by content hash (the constant
// store's second tier, cache/constant_store.h), saved when a graph using
// them compiles with model caching on; and constants the compiler derives
// (runtime/compile/constant_persistence.h), by their share or packing key.
//
// File: <dir>/constants/<name[0:2]>/<name>.kcst, name = SHA-256 of the key
// (with the runtime version and CPU features for derived constants, whose
// bytes depend on them) =
//   4096-byte header: magic "KILNCST\0" | u32 format version | u32 key
//   length | u64 payload size | u64 ChunkedChecksum64 of the payload | the key
//   (its first 4000 bytes) | zeros
//   payload (page-aligned, so a mapping of the file serves it directly)
// Loads map the file shared and read-only: daemons on one host share its
// pages in the page cache. Any mismatch (magic, version, key, size,
// checksum) deletes the file and is a miss. Writes go through a temporary
// and a rename, on a background thread: the compile that derived a weight
// does not wait for the disk. The files count toward the artifact store's
// size cap and are evicted with its entries, least recently used first (a
// load marks a file used).
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "cache/artifact_store.h"
#include "runtime/compile/constant_persistence.h"

namespace kiln::cache {

inline constexpr uint32_t kConstantFileFormatVersion = 1;
inline constexpr size_t kConstantFileHeaderBytes = 4096;

class ConstantFiles : public runtime::ConstantPersistence, public runtime::DeferredChecks {
 public:
  // Files live in store->dir(); nothing is read or written while the store
  // is disabled (no cache directory, or it failed).
  explicit ConstantFiles(ArtifactStore* store);
  // Writes what is still queued, then stops the writer.
  ~ConstantFiles() override;
  ConstantFiles(const ConstantFiles&) = delete;
  ConstantFiles& operator=(const ConstantFiles&) = delete;

  // Makes this the process's runtime::DeferredChecks (until destroyed):
  // only then do loads asked to defer their checksum do so; otherwise
  // every load checks at once.
  void InstallDeferredChecks();

  // Derived constants (runtime::ConstantPersistence).
  std::optional<runtime::ConstantData> Load(const std::string& key, int64_t size,
                                            bool defer_check) override;
  void Save(const std::string& key, runtime::ConstantData data) override;
  // runtime::DeferredChecks: a bad file is deleted (and logged) when found.
  bool CheckBeforeRead(const void* data) override;
  // `data` (from a load) failed its deferred check.
  bool IsBad(const void* data) const;

  // Clients' constants, by content hash; checked when first read (when
  // deferred checks are installed).
  std::optional<runtime::ConstantData> LoadUploaded(const std::string& hash);
  void SaveUploaded(const std::string& hash, runtime::ConstantData data);
  // A file for it exists (not yet verified: LoadUploaded checks it).
  bool HasUploaded(const std::string& hash) const;

  // Waits until every queued write is done (tests, shutdown).
  void Flush();
  // Payload bytes of the files loaded so far.
  uint64_t loaded_bytes() const { return loaded_bytes_.load(); }
  // Payload bytes whose checksum was computed on load (at once or deferred).
  uint64_t checked_bytes() const { return checked_bytes_.load(); }

  // Where `key`'s file is; `derived` selects the naming.
  std::string PathFor(const std::string& key, bool derived) const;

 private:
  std::optional<runtime::ConstantData> LoadFile(const std::string& key, bool derived,
                                                int64_t size, bool defer_check);
  struct Checks;  // loads whose checksum is deferred, by their bytes
  void Enqueue(const std::string& key, bool derived, runtime::ConstantData data);
  void WriterLoop();
  void Write(const std::string& key, const std::string& path, const runtime::ConstantData& data);
  bool Usable() const;

  ArtifactStore* store_;
  absl::Mutex mu_;
  // Files this process wrote, queued or loaded: no second write or stat.
  absl::flat_hash_set<std::string> known_ ABSL_GUARDED_BY(mu_);
  struct Pending {
    std::string key;
    std::string path;
    runtime::ConstantData data;
  };
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: stop writing
  std::atomic<uint64_t> loaded_bytes_{0};
  std::atomic<uint64_t> checked_bytes_{0};
  std::atomic<bool> deferring_{false};
  // Shared with the mappings' deleters, which may outlive this object.
  std::shared_ptr<Checks> checks_;
  std::thread writer_;
};

}  // namespace kiln::cache
