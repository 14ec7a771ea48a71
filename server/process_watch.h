// Whether a client process still exists, for closing the sessions of
// clients that died without saying goodbye (their channels' threads and
// mapped regions would otherwise stay until the daemon exits).
//
// A process is identified by pid plus its start time (field 22 of
// /proc/<pid>/stat), so a recycled pid does not count as the same process.
// Only meaningful for a process the daemon can see (its own pid namespace
// or one nested in it); client_identity.h decides which clients those are.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace kiln::server {

// The inode of this process's /proc/self/ns/pid, or 0 if unknown.
uint64_t OwnPidNamespace();

// The inode of /proc/<pid>/ns/pid: the pid namespace `pid` (as the daemon
// sees it) is in. NOT_FOUND when there is no such process; PERMISSION_DENIED
// when the kernel will not say (a process of another user, or one that made
// itself non-dumpable).
absl::StatusOr<uint64_t> PidNamespaceOf(int pid);

// The pid that process `pid` (as the daemon sees it) has in its own pid
// namespace: the last number of the NSpid line of /proc/<pid>/status
// (readable for every process). The same as `pid` in the daemon's own
// namespace; in a container, the pid its getpid() returns.
absl::StatusOr<int> PidInOwnNamespace(int pid);

// Start time of `pid` in clock ticks since boot; nullopt when there is no
// such process (or /proc cannot say).
std::optional<uint64_t> ProcessStartTicks(int pid);

}  // namespace kiln::server
