// Weights and buffers by content hash, shared by every client of the
// daemon: uploaded once, then referenced by any number of compiled graphs.
//
// Entries are held by shared_ptr; a compiled graph (or a dynamic-shape
// template) keeps the constants it uses alive. Constants nothing holds any
// more are dropped by EvictUnreferenced once nobody has asked about them
// for a grace period, so a long-lived daemon does not keep every model it
// ever served. Thread-safe.
//
// With model caching, the constants of compiled graphs are also saved in
// the cache directory (SetFiles), and a constant not in memory is looked
// for there before it counts as missing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::cache {

class ConstantFiles;

class ConstantStore {
 public:
  // A second tier (cache/constant_files.h): Get and Contains also find
  // constants saved there by this daemon before a restart, or by another
  // daemon on the same cache directory. Set once, before use.
  void SetFiles(ConstantFiles* files) { files_ = files; }

  // Memory for a constant of `size` bytes (64-byte aligned, with room for
  // kernels' vector loads past the end); RESOURCE_EXHAUSTED when there is
  // none.
  static absl::StatusOr<std::shared_ptr<uint8_t>> Allocate(int64_t size);

  // Stores `owned` after checking that the SHA-256 of its bytes is `hash`
  // (INVALID_ARGUMENT otherwise: a client cannot poison an entry other
  // clients will share). The bytes must be the daemon's own (from
  // Allocate), never a client's shared memory, which could change between
  // the hash and any later read. Returns true when newly stored: false
  // when memory holds `hash` already. A file of it in the cache directory
  // does not count: bytes in hand are worth more than a file that may yet
  // fail its check.
  absl::StatusOr<bool> Put(const std::string& hash, runtime::ConstantData owned);
  // Put of a copy of `size` bytes at `data` (the daemon's memory).
  absl::StatusOr<bool> PutCopy(const std::string& hash, const void* data, int64_t size);
  // `size`: what the graph asking for it says it holds, which bounds what
  // is read from a file (a file of another size is not it).
  absl::StatusOr<runtime::ConstantData> Get(const std::string& hash, int64_t size) const;
  // In memory, or a file for it looks right (ConstantFiles::HasUploaded).
  bool Contains(const std::string& hash) const;
  // In memory.
  bool InMemory(const std::string& hash) const;
  // Forgets `hash` if its entry holds these bytes (a copy mapped from the
  // cache directory that failed its deferred check).
  void Drop(const std::string& hash, const void* bytes);
  // Forgets `hash` now, grace or not, if nothing but the store holds its
  // bytes: a compile that packed it and reads it no more says so
  // (runtime::CompileHints::release_constant). True when dropped.
  bool ReleaseIfUnheld(const std::string& hash);

  size_t count() const;
  int64_t bytes() const;

  struct Evicted {
    size_t count = 0;
    int64_t bytes = 0;
  };
  // Drops every constant that only the store holds and that nobody has
  // stored, looked up or asked about (Put, Get, Contains) within `grace`:
  // a client that has just checked or uploaded a constant is about to
  // compile with it. `now` is for tests.
  Evicted EvictUnreferenced(absl::Duration grace, absl::Time now = absl::Now());

 private:
  struct Entry {
    runtime::ConstantData data;
    absl::Time touched;
  };
  ConstantFiles* files_ = nullptr;
  mutable absl::Mutex mu_;
  // `touched` changes under the lock in const lookups too.
  mutable absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  mutable int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Get may add a saved constant
};

}  // namespace kiln::cache
