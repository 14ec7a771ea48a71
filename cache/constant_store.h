// Weights and buffers by content hash, shared by every client of the
// daemon: uploaded once, then referenced by any number of compiled graphs.
//
// Entries are held by shared_ptr; a compiled graph keeps the constants it
// uses alive. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/compile/compiled_graph.h"

namespace kiln::cache {

class ConstantStore {
 public:
  // Copies `size` bytes into the store after checking that their SHA-256 is
  // `hash` (INVALID_ARGUMENT otherwise: a client cannot poison an entry
  // other clients will share). Returns true when newly stored.
  absl::StatusOr<bool> Put(const std::string& hash, const void* data, int64_t size);
  absl::StatusOr<runtime::ConstantData> Get(const std::string& hash) const;
  bool Contains(const std::string& hash) const;

  size_t count() const;
  int64_t bytes() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, runtime::ConstantData> entries_ ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kiln::cache
