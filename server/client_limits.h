// What one client session may hold in the daemon. Each cap is checked when
// something is added, so a client past it gets RESOURCE_EXHAUSTED naming
// the numbers and the flag, and nothing it already holds changes.
#pragma once

#include <cstdint>

namespace kiln::server {

struct ClientLimits {
  // Compiled-graph handles (and dynamic-shape templates) open at once.
  uint64_t max_handles = 4096;
  // Bytes of shared memory registered at once (--max-client-shm-mb).
  uint64_t max_region_bytes = uint64_t{64} << 30;
  // Bytes of constants the client uploads that the store did not hold
  // yet, over the session's life (--max-client-constant-mb).
  uint64_t max_constant_bytes = uint64_t{64} << 30;
};

}  // namespace kiln::server
