// The remote tier's settings (cache/redis_store.h), as kilnd's flags and
// config file give them (server/daemon_config.h).
#pragma once

#include <cstdint>
#include <string>

namespace kiln::cache {

struct RemoteCacheConfig {
  // redis://[[user]:password@]host[:port][/db] or unix:///path/to/socket[?db=N];
  // empty: no remote tier.
  std::string url;
  std::string key_prefix = "kiln:";
  // The fleet's key: 64 hex digits and a newline, a file of the daemon's
  // user that nobody else may read (0600). Required with a URL.
  std::string key_file;
  // Deadline of each Redis call (connect, send, receive).
  int64_t timeout_ms = 500;
  // Expiry of what this daemon writes; 0: none (Redis's own eviction).
  int64_t ttl_s = 0;
  // Largest payload written or read (bigger ones are neither).
  int64_t max_value_bytes = int64_t{1} << 30;
  // Pieces large values are written in.
  int64_t chunk_bytes = int64_t{8} << 20;
};

}  // namespace kiln::cache
