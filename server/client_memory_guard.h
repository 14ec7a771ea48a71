// Survives client shared memory that shrinks while the daemon uses it.
//
// A client can ftruncate a /dev/shm object it registered, or hand over a
// sparse one on a full /dev/shm: the next access to a page the object no
// longer backs raises SIGBUS in whichever daemon thread made it (a channel
// thread polling its block, a kernel inside oneDNN on a worker thread, an
// upload's copy). Jumping out of the handler is not possible in threads
// that run foreign code, so the handler needs no unwinding: it replaces the
// whole mapping that faulted with private anonymous memory (mmap MAP_FIXED,
// atomic for the other threads), marks it broken and returns, and the
// faulting instruction runs again on zero pages. What the daemon computes
// from there on reaches nobody: every user of client memory asks Broken()
// when done with it and fails its call (ShmRegion does, see shm_region.h).
//
// A SIGBUS outside a registered mapping is a bug, and the signal's previous
// disposition (the default: the daemon dies with a core; a sanitizer's
// report) takes it, as if the guard were not there.
//
// Thread-safe. Registered mappings must not overlap, and a mapping must be
// unregistered before it is unmapped; while any thread may still touch a
// mapping, it stays registered (ShmRegion's owners hold it for that long).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace kiln::server {

// Mappings registered at once, daemon-wide.
inline constexpr size_t kMaxGuardedMappings = 16384;

// Installs the SIGBUS handler (once per process; later calls do nothing).
void InstallClientMemoryGuard();

// Registers [base, base + size); installs the handler if needed. Returns a
// slot for Broken() and Unregister(); RESOURCE_EXHAUSTED when
// kMaxGuardedMappings are registered.
absl::StatusOr<size_t> RegisterGuardedMapping(void* base, size_t size);
void UnregisterGuardedMapping(size_t slot);

// True once an access to the slot's mapping faulted: the mapping now holds
// private zero pages, not the client's object.
bool GuardedMappingBroken(size_t slot);

}  // namespace kiln::server
