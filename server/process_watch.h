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
#include <vector>

#include "absl/status/statusor.h"

namespace kiln::server {

// The inode of this process's /proc/self/ns/pid, or 0 if unknown.
uint64_t OwnPidNamespace();

// The inode of /proc/<pid>/ns/pid: the pid namespace `pid` (as the daemon
// sees it) is in. NOT_FOUND when there is no such process; PERMISSION_DENIED
// when the kernel will not say: reading it needs ptrace access to the
// process (refused for one that made itself non-dumpable, or to a daemon
// confined by a security profile).
absl::StatusOr<uint64_t> PidNamespaceOf(int pid);

// The pids process `pid` (as the daemon sees it) has in each pid namespace
// from the one /proc belongs to down to its own: the NSpid line of
// /proc/<pid>/status, which every process may read. The last is the pid
// its getpid() returns; the count says how deep its namespace is nested.
absl::StatusOr<std::vector<int>> NamespacePids(int pid);

// Start time of `pid` in clock ticks since boot; nullopt when there is no
// such process (or /proc cannot say).
std::optional<uint64_t> ProcessStartTicks(int pid);

}  // namespace kiln::server
