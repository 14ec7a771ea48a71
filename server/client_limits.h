// What clients may hold in the daemon: each session (ClientLimits), and all
// of them together (DaemonLimits). Each cap is checked when something is
// added, so a client past it gets RESOURCE_EXHAUSTED naming the numbers and
// the flag, and nothing it (or anyone else) already holds changes.
#pragma once

#include <cstdint>

namespace kiln::server {

struct ClientLimits {
  // Compiled-graph handles (and dynamic-shape templates) open at once.
  uint64_t max_handles = 4096;
  // Dynamic-shape templates open at once (each holds its whole graph);
  // they count as handles too (--max-client-templates).
  uint64_t max_templates = 256;
  // Bytes of shared memory registered at once (--max-client-shm-mb).
  uint64_t max_region_bytes = uint64_t{64} << 30;
  // Regions registered at once, whatever their size: each is a mapping
  // (--max-client-regions).
  uint64_t max_regions = 1024;
  // Call channels open at once: one daemon thread each (--max-client-channels).
  uint64_t max_channels = 64;
  // Bytes of constants the client uploads that the store did not hold
  // yet, over the session's life (--max-client-constant-mb).
  uint64_t max_constant_bytes = uint64_t{64} << 30;
};

struct DaemonLimits {
  // Sessions open at once, all clients together (--max-sessions).
  uint64_t max_sessions = 1024;
  // Sessions one client process holds at once (--max-client-sessions): the
  // process the kernel names on the unix socket, else the claimed pid on
  // the TCP peer's address.
  uint64_t max_client_sessions = 16;
  // Call channels open at once, all sessions together (--max-channels).
  uint64_t max_channels = 512;
  // Nodes in one graph a compile takes (--max-graph-nodes): passes and the
  // memory planner are not linear in the node count everywhere, so this
  // bounds a compile's time as well as its memory.
  uint64_t max_graph_nodes = 65536;
};

}  // namespace kiln::server
