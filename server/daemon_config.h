// kilnd's settings: flags, a config file (--config, read by config_file.h),
// defaults from the environment, --help text.
//
// Precedence: command-line flags > config file > environment > built-in
// defaults. A config file's keys are the long flag names, and each entry is
// applied through the same flag table as the command line.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "cache/remote_cache_config.h"
#include "server/client_limits.h"

namespace kiln::server {

struct DaemonConfig {
  std::string socket_path;  // unix socket; empty only when --no-unix
  std::string tcp_address;  // host:port, empty = no TCP
  std::string token_file;   // the token TCP clients must send (required with TCP)
  std::string tls_cert;     // PEM certificate chain and key: TCP over TLS
  std::string tls_key;
  std::string cache_dir;    // empty = no on-disk cache
  uint64_t cache_max_mb = 2048;  // cap on the cache's entries, 0 = none
  cache::RemoteCacheConfig remote_cache;  // url empty = no remote tier
  std::string log_level = "info";
  std::string log_file;
  std::string log_format = "text";  // text or json (one object per line)
  std::string config_file;  // the file read, empty = none
  // Minutes without client sessions or calls after which the daemon shuts
  // down as on SIGTERM; 0 = never.
  double idle_exit_min = 0;
  int metrics_port = 0;  // Prometheus text on 127.0.0.1:PORT/metrics; 0 = off
  int threads = 0;  // 0 = all cores
  // Seconds an uploaded constant no compiled graph holds is kept.
  int constant_grace_s = 60;
  int64_t spin_us = 2000;  // runtime/exec/arenas.h, SetKeepWarm
  ClientLimits limits;         // per session
  DaemonLimits daemon_limits;  // all sessions together
  // For tests: a named pipe every run waits at (test_call_gate.h); empty =
  // no gate. Command line only.
  std::string test_call_gate;
  bool help = false;
  bool version = false;
};

// Default socket: $KILN_SOCKET, else $XDG_RUNTIME_DIR/kiln/kilnd.sock, else
// /tmp/kiln-<uid>/kilnd.sock.
std::string DefaultSocketPath();
// Default cache: $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else
// ~/.cache/kiln.
std::string DefaultCacheDir();

// Defaults and environment, then the config file (--config, else
// $KILN_CONFIG_FILE; not read with --help or --version), then the flags.
// INVALID_ARGUMENT for a bad flag or value; a config-file error names the
// file and line ("kilnd.toml:3: ...").
[[nodiscard]] absl::StatusOr<DaemonConfig> ParseFlags(int argc, char** argv);
// The token in `path`: the file must be ours and closed to other users
// (mode 0600 or stricter), the token at least 16 characters (surrounding
// whitespace dropped).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);
std::string HelpText();

}  // namespace kiln::server
