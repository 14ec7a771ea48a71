#include "runtime/compile/constant_persistence.h"

#include <atomic>

namespace kiln::runtime {
namespace {
thread_local ConstantPersistence* current = nullptr;
thread_local CompileReads* current_reads = nullptr;
std::atomic<DeferredChecks*> deferred_checks{nullptr};
}  // namespace

void SetDeferredChecks(DeferredChecks* checks) { deferred_checks.store(checks); }

bool CheckBeforeRead(const void* data) {
  DeferredChecks* checks = deferred_checks.load();
  return checks == nullptr || data == nullptr || checks->CheckBeforeRead(data);
}

void CheckBeforePrepareReads(const void* data) {
  if (!CheckBeforeRead(data) && current_reads != nullptr) current_reads->failed_check = true;
}

bool NotReadIn(const void* data) {
  DeferredChecks* checks = deferred_checks.load();
  return checks != nullptr && data != nullptr && checks->NotReadIn(data);
}

CompileReads* CurrentCompileReads() { return current_reads; }

CompileReadsScope::CompileReadsScope(CompileReads* reads) : previous_(current_reads) {
  current_reads = reads;
}

CompileReadsScope::~CompileReadsScope() { current_reads = previous_; }

ConstantPersistence* CurrentPersistence() { return current; }

PersistenceScope::PersistenceScope(ConstantPersistence* persistence) : previous_(current) {
  current = persistence;
}

PersistenceScope::~PersistenceScope() { current = previous_; }

}  // namespace kiln::runtime
