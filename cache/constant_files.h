// Constants kept in the cache directory, so a restarted daemon (or another
// daemon on the same directory) reads them instead of asking clients to
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
//   length | u64 payload size | u64 zero | the key (its first 4032 bytes) |
//   zeros | at offset 4064, the MAC: 12-byte nonce, 16-byte tag, 4 zeros
//   payload
// The directory is input (cache/cache_dir.h): a file is opened without
// following links or blocking, only as a regular file of the daemon's user,
// and read up to the size its header gives, which must be the file's.
// What is used is always what was verified: the payload is read into the
// daemon's memory and that copy is checked, so a file rewritten or
// truncated afterwards changes nothing the daemon holds. The checks:
//   - a client's constant: the SHA-256 of the bytes is the hash it is
//     saved under (its name is its check; the MAC field is zero);
//   - a derived constant: the MAC, a GMAC (cache/digest.h) under the
//     directory's key (cache/cache_key.h) with a random nonce, of the key,
//     runtime version, CPU features, size and payload, so a file that no
//     daemon holding the key wrote is never used (it is derived again from
//     the client's checked weights).
// Any mismatch deletes the file (logged) and is a miss; a bad file that
// cannot be deleted is remembered and stays a miss. Writes go through a
// temporary and a rename, on a background thread: the compile that derived
// a weight does not wait for the disk. The files count toward the artifact
// store's size cap and are evicted with its entries, least recently used
// first (a load marks a file used).
//
// Loads may defer the read and the check until the bytes are first needed
// (runtime::DeferredChecks, CheckBeforeRead), so a weight that is loaded
// but never used (a client's weight whose fold was saved, a fold whose
// packed form was saved) costs neither a read nor a hash: its memory is
// handed out before the bytes are read into it. Small constants (64 KiB at
// most: biases, statistics) are read in at the load all the same, as
// kernels copy them while they are prepared; the compiler prepares a
// kernel again should it have read bytes not read in yet
// (runtime::NotReadIn).
//
// Thread-safe.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "cache/artifact_store.h"
#include "cache/cache_key.h"
#include "cache/redis_store.h"
#include "runtime/compile/constant_persistence.h"

namespace kiln::cache {

inline constexpr uint32_t kConstantFileFormatVersion = 2;
inline constexpr size_t kConstantFileHeaderBytes = 4096;

class ConstantFiles : public runtime::ConstantPersistence, public runtime::DeferredChecks {
 public:
  // Files live in store->dir(); nothing is read or written while the store
  // is disabled (no cache directory, or it failed or was refused). Derived
  // constants are checked under the directory's key, which the store read
  // (or created) before enabling itself.
  // `remote` (may be null): derived constants not in the directory are
  // looked up there (and saved here when found; a load that may defer its
  // check fetches them when first read), and those saved here are
  // published there; packed weights excepted, which each daemon packs.
  explicit ConstantFiles(ArtifactStore* store, RedisStore* remote = nullptr);
  // Writes what is still queued, then stops the writer.
  ~ConstantFiles() override;
  ConstantFiles(const ConstantFiles&) = delete;
  ConstantFiles& operator=(const ConstantFiles&) = delete;

  // Makes this the process's runtime::DeferredChecks (until destroyed):
  // only then do loads asked to defer their read do so; otherwise every
  // load reads and checks at once.
  void InstallDeferredChecks();

  // Derived constants (runtime::ConstantPersistence).
  std::optional<runtime::ConstantData> Load(const std::string& key, int64_t size,
                                            bool defer_check) override;
  void Save(const std::string& key, runtime::ConstantData data) override;
  // runtime::DeferredChecks: reads a deferred load's bytes in if they are
  // not yet, then checks that copy; a bad file is deleted (and logged)
  // when found.
  bool CheckBeforeRead(const void* data) override;
  bool NotReadIn(const void* data) override;
  // `data` (from a load) failed its deferred check.
  bool IsBad(const void* data) const;

  // Clients' constants, by content hash, of `size` bytes (what the graph
  // asking for it says; a file of another size is a miss). Checked when
  // first read (when deferred checks are installed).
  std::optional<runtime::ConstantData> LoadUploaded(const std::string& hash, int64_t size);
  void SaveUploaded(const std::string& hash, runtime::ConstantData data);
  // A file for it that can be opened and whose header is right exists
  // (its bytes are not read here: LoadUploaded checks them). One that
  // cannot be used is deleted (logged), so it is never "present" again.
  bool HasUploaded(const std::string& hash);

  // A constant saved in the directory, as its file's header names it.
  struct Saved {
    std::string key;  // "h:<sha256>": a client's; anything else: derived
    bool derived = false;
    uint64_t size = 0;    // payload bytes
    int64_t mtime_s = 0;  // its last use
  };
  // The constants saved in the directory that this runtime on this CPU can
  // use (derived ones of other runtimes are not), as their headers say:
  // their bytes are neither read nor checked (ReadSaved does both).
  std::vector<Saved> List();
  // `saved`'s bytes, read and checked now, without marking the file used;
  // nullopt when it is gone, or bad (then deleted, and logged).
  std::optional<runtime::ConstantData> ReadSaved(const Saved& saved);
  // Saves `data` under `saved.key` as a compile would (in the background:
  // Flush waits), not published to the remote tier. The caller has
  // checked the bytes (cache/cache_archive.h).
  void Import(const Saved& saved, runtime::ConstantData data);

  // Waits until every queued write is done (tests, shutdown).
  void Flush();
  // Payload bytes of the files loaded so far.
  uint64_t loaded_bytes() const { return loaded_bytes_.load(); }
  // Payload bytes checked (at once or deferred).
  uint64_t checked_bytes() const { return checked_bytes_.load(); }

  // Where `key`'s file is; `derived` selects the naming.
  std::string PathFor(const std::string& key, bool derived) const;

 private:
  struct Name;     // where a key's file is, and what its MAC covers
  struct Opened;   // a file whose header passed
  struct Checks;   // loads whose read or check is deferred, by their bytes
  Name NameFor(const std::string& key, bool derived) const;
  // Opens `name`'s file and checks its header against `key` and `size`
  // (-1: any). NOT_FOUND: a plain miss; FAILED_PRECONDITION: a miss that
  // is no fault of the file's (another size asked for, a file already
  // rejected); DATA_LOSS: the file is bad and has been rejected.
  absl::StatusOr<Opened> OpenChecked(const Name& name, int64_t size);
  // Reads the payload of `file` into `out`; DATA_LOSS (the file rejected)
  // when it is shorter than its header said.
  absl::Status ReadPayload(Opened& file, const Name& name, uint8_t* out);
  // DATA_LOSS saying why when `data` is not what `name` says (content
  // hash) or its MAC (`iv`, `tag`) does not authenticate it.
  absl::Status Verify(const Name& name, const uint8_t* data, uint64_t size, const MacIv& iv,
                      const MacTag& tag);
  // Logs, deletes `name`'s file if it is still the one `st` describes, and
  // forgets it; if it cannot be deleted, remembers it as bad.
  void Reject(const Name& name, int shard, const struct stat& st, absl::string_view why);
  // `st` is a file Reject could not delete.
  bool RejectedBefore(const Name& name, const struct stat& st);
  // A deferred load from the remote tier (`check.remote`), read in now;
  // false when the value is gone or does not open. Called with check.mu held.
  bool ReadInRemote(struct PendingCheck& check);
  // A load whose check is deferred: registers `check` for `bytes`, and
  // drops it when the returned data's last reference goes.
  runtime::ConstantData Deferred(std::shared_ptr<uint8_t> bytes,
                                 std::shared_ptr<struct PendingCheck> check);
  std::optional<runtime::ConstantData> LoadFile(const std::string& key, bool derived,
                                                int64_t size, bool defer_check,
                                                bool mark_used = true);
  void Enqueue(const std::string& key, bool derived, runtime::ConstantData data,
               bool publish = true);
  void WriterLoop();
  void Write(const Name& name, const runtime::ConstantData& data);
  bool Usable() const;

  ArtifactStore* store_;
  RedisStore* remote_;  // may be null
  std::optional<CacheKey> key_;  // set once, at construction
  absl::Mutex mu_;
  // Files this process wrote, queued or loaded: no second write or stat.
  absl::flat_hash_set<std::string> known_ ABSL_GUARDED_BY(mu_);
  // Rejected files that could not be deleted, by path: the same file
  // (device, inode, size, change time) is a miss without another look.
  struct FileId {
    dev_t dev;
    ino_t ino;
    off_t size;
    int64_t ctime_ns;
    static FileId Of(const struct stat& st) {
      return FileId{st.st_dev, st.st_ino, st.st_size,
                    int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec};
    }
    bool operator==(const FileId& o) const {
      return dev == o.dev && ino == o.ino && size == o.size && ctime_ns == o.ctime_ns;
    }
  };
  absl::flat_hash_map<std::string, FileId> unremovable_ ABSL_GUARDED_BY(mu_);
  struct Pending {
    std::string key;
    bool derived;
    runtime::ConstantData data;
    bool publish = true;  // also to the remote tier (not what came from it)
  };
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // a write failed: stop writing
  std::atomic<uint64_t> loaded_bytes_{0};
  std::atomic<uint64_t> checked_bytes_{0};
  std::atomic<bool> deferring_{false};
  // Shared with the loaded bytes' deleters, which may outlive this object.
  std::shared_ptr<Checks> checks_;
  std::thread writer_;
};

}  // namespace kiln::cache
