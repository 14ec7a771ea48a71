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
#include <vector>

#include "runtime/compile/constant_data.h"

namespace kiln::runtime {

class ConstantPersistence {
 public:
  virtual ~ConstantPersistence() = default;
  // The bytes saved under `key`, exactly `size` of them, or nullopt (never
  // saved, or the saved copy failed its checks and was dropped).
  // `defer_check`: the bytes may be handed out before their checksum is
  // checked; whoever reads them calls CheckBeforeRead first (below). A
  // derived constant that only feeds a derivation found saved (a folded
  // weight whose packed form was saved too) is then never read at all.
  virtual std::optional<ConstantData> Load(const std::string& key, int64_t size,
                                           bool defer_check) = 0;
  // Saves `data` under `key` unless already saved. May work in the
  // background (it keeps `data` alive until written) and may give up
  // (full disk): persistence is an optimization, never an error.
  virtual void Save(const std::string& key, ConstantData data) = 0;
};

// Constant bytes handed out before their checks (a cache file whose bytes
// are read in and verified when first needed). Process-wide: a compile may
// find such bytes through the tables of shared constants, loaded by
// another.
class DeferredChecks {
 public:
  virtual ~DeferredChecks() = default;
  // True when `data` awaits no check or passes it now (once; concurrent
  // callers wait for the one checking); false when its bytes are bad.
  // Large constants may not even be read in before this: whoever reads
  // bytes that may be deferred asks first.
  virtual bool CheckBeforeRead(const void* data) = 0;
  // `data` is handed out but its bytes are not read in yet: whatever read
  // it did not ask CheckBeforeRead first, and saw no weight.
  virtual bool NotReadIn(const void* data) = 0;
};
// Installed once by the daemon before any compile; null: nothing defers.
void SetDeferredChecks(DeferredChecks* checks);
// Before reading a constant's bytes at compile time (to fold it, pack it,
// or in a run): true when they may be read. False means the compile must
// fail (DATA_LOSS) and be redone; the bad copy is already dropped.
bool CheckBeforeRead(const void* data);
// CheckBeforeRead for a kernel's prepare function, which has no status to
// return: a failure is recorded in the compile's CompileReads, and the
// compile fails with DATA_LOSS once the kernel is prepared.
void CheckBeforePrepareReads(const void* data);
// DeferredChecks::NotReadIn of the installed checks (false without).
bool NotReadIn(const void* data);

// What a compile read, for deciding which deferred checks it needs. Set by
// Compile on its thread; PackConstant reports srcs it did not read (their
// packing was found) and a failed check of a src it had to read.
struct CompileReads {
  std::vector<const void*> packed_without_reading;
  bool failed_check = false;
};
CompileReads* CurrentCompileReads();
class CompileReadsScope {
 public:
  explicit CompileReadsScope(CompileReads* reads);
  ~CompileReadsScope();
  CompileReadsScope(const CompileReadsScope&) = delete;
  CompileReadsScope& operator=(const CompileReadsScope&) = delete;

 private:
  CompileReads* previous_;
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
