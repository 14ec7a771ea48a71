// Where constants derived at compile time (folded weights, packed weights)
// can outlive the daemon: a warm start after a restart, or another daemon
// on the same cache directory, then maps them instead of computing them.
//
// The runtime only knows this interface; the daemon implements it over its
// cache directory (cache/constant_files.h) and installs it, per compile,
// with PersistenceScope when model caching is on. Keys are share keys
// (compile/shared_constants.h) or, for packed weights, share key plus the
// layouts: equal keys mean equal bytes, so a saved constant is valid for
// every later compile that derives the same key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/compile/compiled_graph.h"

namespace kiln::runtime {

class ConstantPersistence {
 public:
  virtual ~ConstantPersistence() = default;
  // The bytes saved under `key`, exactly `size` of them, or nullopt (never
  // saved, or the saved copy failed its checks and was dropped).
  virtual std::optional<ConstantData> Load(const std::string& key, int64_t size) = 0;
  // Saves `data` under `key` unless already saved. May work in the
  // background (it keeps `data` alive until written) and may give up
  // (full disk): persistence is an optimization, never an error.
  virtual void Save(const std::string& key, ConstantData data) = 0;
};

// The persistence of the compile running on this thread; null when none
// (model caching off, no cache directory).
ConstantPersistence* CurrentPersistence();

// Installs `persistence` for the compile on this thread while in scope.
// Thread-local rather than an argument because packing happens deep in
// kernel prepare functions, which run on the compiling thread.
class PersistenceScope {
 public:
  explicit PersistenceScope(ConstantPersistence* persistence);
  ~PersistenceScope();
  PersistenceScope(const PersistenceScope&) = delete;
  PersistenceScope& operator=(const PersistenceScope&) = delete;

 private:
  ConstantPersistence* previous_;
};

}  // namespace kiln::runtime
