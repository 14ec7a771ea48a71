// Whether a client process still exists, for closing the sessions of
// clients that died without saying goodbye (their channels' threads and
// mapped regions would otherwise stay until the daemon exits).
//
// A process is identified by pid plus its start time (field 22 of
// /proc/<pid>/stat), so a recycled pid does not count as the same process.
// Only meaningful when the client runs in the daemon's pid namespace; the
// client says which one it is in (OpenSessionRequest.pid_namespace).
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::server {

// The inode of this process's /proc/self/ns/pid, or 0 if unknown.
uint64_t OwnPidNamespace();

// Start time of `pid` in clock ticks since boot; nullopt when there is no
// such process (or /proc cannot say).
std::optional<uint64_t> ProcessStartTicks(int pid);

}  // namespace kiln::server
