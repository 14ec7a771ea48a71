#include "server/daemon_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "cache/compiler_version.h"
#include "server/config_file.h"
#include "server/tcp_address.h"

namespace kiln::server {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

absl::Status ParseMegabytes(const std::string& what, const std::string& text, uint64_t* out) {
  // The cap is kept in bytes: a count of MiB past 2^44 would overflow it.
  if (!absl::SimpleAtoi(text, out) || *out > (uint64_t{1} << 44)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " takes a number of MiB >= 0, not '", text, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string DefaultSocketPath() {
  if (std::string s = Env("KILN_SOCKET"); !s.empty()) return s;
  if (std::string x = Env("XDG_RUNTIME_DIR"); !x.empty()) return x + "/kiln/kilnd.sock";
  return absl::StrCat("/tmp/kiln-", getuid(), "/kilnd.sock");
}

std::string DefaultCacheDir() {
  if (std::string s = Env("KILN_CACHE_DIR"); !s.empty()) return s;
  if (std::string x = Env("XDG_CACHE_HOME"); !x.empty()) return x + "/kiln";
  if (std::string h = Env("HOME"); !h.empty()) return h + "/.cache/kiln";
  return "";
}

std::string HelpText() {
  return absl::StrCat(
      "kilnd ", cache::CompilerVersion(), " - the Kiln compile-and-execute daemon\n\n",
      "Usage: kilnd [flags]\n",
      "       kilnd cache-export|cache-import ... (a cache archive; kilnd cache-export --help)\n\n",
      "Flags:\n",
      "  --socket PATH      unix socket to listen on (default: $KILN_SOCKET, else\n",
      "                     $XDG_RUNTIME_DIR/kiln/kilnd.sock, else /tmp/kiln-<uid>/kilnd.sock;\n",
      "                     now: ", DefaultSocketPath(), ").\n",
      "                     Its directory is created with mode 0700; <PATH>.lock is held\n",
      "                     exclusively so a second daemon cannot take the socket over.\n",
      "  --tcp HOST:PORT    also listen on TCP (off by default): a host name, IPv4 address\n",
      "                     or [IPv6] address, and a port from 1 to 65535; nothing else\n",
      "                     (no unix: addresses). Needs --token-file: every TCP call must\n",
      "                     carry the token (clients: environment variable KILN_TOKEN).\n",
      "                     Unix-socket clients are checked by their credentials instead:\n",
      "                     only this user's processes may connect.\n",
      "  --token-file PATH  file holding the TCP token (at least 16 characters; mode 0600;\n",
      "                     env KILN_TOKEN_FILE).\n",
      "  --tls-cert PATH, --tls-key PATH\n",
      "                     PEM certificate chain and private key: TCP is served over TLS\n",
      "                     (clients: KILN_TLS_CA names the CA certificate).\n",
      "  --cache-dir DIR    compiled-graph cache (default: $KILN_CACHE_DIR, else\n",
      "                     $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; now: ", DefaultCacheDir(), ").\n",
      "  --no-cache         do not read or write the on-disk cache.\n",
      "  --cache-max-mb N   cap on the cache's total size in MiB (default: $KILN_CACHE_MAX_MB,\n",
      "                     else 2048; 0: no cap). Past it, the least recently used entries\n",
      "                     (by file mtime, which a cache hit updates) are deleted.\n",
      "  --remote-cache URL  a Redis shared by a fleet's daemons, behind the cache\n",
      "                     directory: redis://[[user]:password@]host[:port][/db] or\n",
      "                     unix:///path/redis.sock[?db=N] (env KILN_REMOTE_CACHE; default\n",
      "                     none). Compiled graphs and derived weights are looked up there\n",
      "                     after the cache directory and published there after a compile;\n",
      "                     one daemon of the fleet compiles a graph, the others wait and\n",
      "                     fetch it. A Redis that is down or slow costs a warning and a\n",
      "                     local compile.\n",
      "  --remote-cache-key-file PATH  the fleet's key (64 hex digits; mode 0600; env\n",
      "                     KILN_REMOTE_CACHE_KEY_FILE), required with --remote-cache:\n",
      "                     values are sealed with it and refused without it.\n",
      "  --remote-cache-prefix P       prefix of every Redis key (default kiln:).\n",
      "  --remote-cache-ttl-s N        expiry of values written (default 0: none).\n",
      "  --remote-cache-timeout-ms N   deadline of each Redis call (default 500).\n",
      "  --remote-cache-max-value-mb N  largest value written or read (default 1024).\n",
      "  --threads N        threads for execution (default 0: all cores): how many runs\n",
      "                     go at once, the size of a graph's thread arena by default,\n",
      "                     and the most a client's config num_threads gets.\n",
      "  --constant-grace-s N  keep an uploaded weight no compiled graph holds (a graph\n",
      "                     holds only what its runs read, not weights it packed) for N\n",
      "                     seconds after its last use (default 60); clients upload again.\n",
      "                     Run arenas that concurrent calls added to a graph (beyond\n",
      "                     one) are freed after N seconds unused too.\n",
      "  --spin-us N        after a run, the threads that ran it with the calling one spin\n",
      "                     up to N microseconds waiting for the next run before sleeping\n",
      "                     (default 2000; 0: sleep at once). A thread that slept wakes\n",
      "                     into the next run late: that run starts on fewer threads.\n",
      "  --max-client-handles N       compiled-graph handles one client may hold (default 4096).\n",
      "  --max-client-templates N     dynamic-shape graphs one client may hold (default 256).\n",
      "  --max-client-shm-mb N        shared memory one client may register, MiB (default 65536).\n",
      "  --max-client-regions N       shared-memory regions one client may register (default 1024).\n",
      "  --max-client-channels N      call channels one client may open (default 64).\n",
      "  --max-client-constant-mb N   new constant bytes one client may upload, MiB\n",
      "                     (default 65536).\n",
      "  --max-client-sessions N      sessions one client process may open (default 16).\n",
      "  --max-sessions N   sessions open at once, all clients (default 1024).\n",
      "  --max-channels N   call channels open at once, all clients (default 512; each\n",
      "                     is a thread).\n",
      "  --max-graph-nodes N  nodes in one graph a compile takes (default 65536).\n",
      "                     Past a cap the request fails with RESOURCE_EXHAUSTED naming\n",
      "                     the numbers and the flag; nothing else changes.\n",
      "  --log-level LEVEL  trace, debug, info, warn, error (default info; env KILN_LOG_LEVEL).\n",
      "  --log-file PATH    append logs to PATH instead of stderr.\n",
      "  --log-format FMT   text (default) or json: one JSON object per line with time\n",
      "                     (ISO 8601, UTC, ms), level, pid, logger and msg\n",
      "                     (env KILN_LOG_FORMAT).\n",
      "  --idle-exit-min N  shut down (as on SIGTERM, exit 0) after N minutes with no client\n",
      "                     sessions open and no call in flight (default 0: never; fractions\n",
      "                     allowed). Clients that start kilnd on demand pass their option\n",
      "                     daemon_idle_min (KILN_DAEMON_IDLE_MIN, default 10).\n",
      "  --metrics-port PORT  serve Prometheus metrics (text format 0.0.4) at\n",
      "                     http://127.0.0.1:PORT/metrics (default 0: off). Listens on the\n",
      "                     loopback interface only, never on other interfaces, and\n",
      "                     unauthenticated: any local user can read it.\n",
      "  --config FILE      read settings from FILE (env KILN_CONFIG_FILE), a TOML file\n",
      "                     whose top-level keys are these flags' long names without\n",
      "                     the dashes (cache-max-mb = 4096, no-cache = true,\n",
      "                     log-level = \"debug\": text is quoted). Command-line flags\n",
      "                     win over the file, the file over environment variables.\n",
      "                     help, version, config and test-call-gate are command-line only.\n",
      "  --test-call-gate FIFO  for tests only: every run waits until the test writes\n",
      "                     a byte to the named pipe FIFO (server/test_call_gate.h).\n",
      "                     Command line only.\n",
      "  --version          print the runtime version and exit.\n",
      "  --help             print this text and exit.\n\n",
      "Exit codes: 0 clean shutdown (SIGTERM/SIGINT, or idle), 2 bad flags or config\n",
      "file, 3 another daemon holds the socket's lock, 1 other startup failure.\n");
}

namespace {

constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error"};
constexpr const char* kLogFormats[] = {"text", "json"};

template <size_t N>
bool OneOf(const std::string& value, const char* const (&choices)[N]) {
  for (const char* c : choices) {
    if (value == c) return true;
  }
  return false;
}

absl::Status ParseCount(const std::string& flag, const std::string& text, int min, int max,
                        const char* what, int* out) {
  if (!absl::SimpleAtoi(text, out) || *out < min || *out > max) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " takes ", what, ", not '", text, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParsePositive(const std::string& flag, const std::string& text, uint64_t* out) {
  if (!absl::SimpleAtoi(text, out) || *out == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " takes a number >= 1, not '", text, "'"));
  }
  return absl::OkStatus();
}

// A switch's value: bare on the command line means true; a config file
// (or --flag=VALUE) spells it out.
absl::StatusOr<bool> ParseSwitch(const std::string& flag, const std::string& text) {
  const std::string v = absl::AsciiStrToLower(text);
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " takes true or false, not '", text, "'"));
}

// Sets one flag's field from its value; `flag` ("--name") names it in
// messages.
using FlagSetter = absl::Status (*)(DaemonConfig& c, const std::string& flag,
                                    const std::string& value);

struct FlagSpec {
  std::string_view name;  // without the leading dashes: also the config-file key
  bool is_switch;         // takes no value on the command line
  bool command_line_only; // help, version, config: meaningless in a file;
                          // test-call-gate: no file turns a test hook on
  FlagSetter set;
};

absl::Status SetString(std::string* field, const std::string& value) {
  *field = value;
  return absl::OkStatus();
}

// Every flag kilnd takes, once: the command line and the config file both
// go through this table.
constexpr FlagSpec kFlags[] = {
    {"help", true, true,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       absl::StatusOr<bool> on = ParseSwitch(f, v);
       if (on.ok()) c.help = *on;
       return on.status();
     }},
    {"version", true, true,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       absl::StatusOr<bool> on = ParseSwitch(f, v);
       if (on.ok()) c.version = *on;
       return on.status();
     }},
    {"config", false, true,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.config_file, v);
     }},
    {"socket", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.socket_path, v);
     }},
    {"tcp", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) -> absl::Status {
       absl::StatusOr<std::string> address = ParseTcpAddress(v);
       if (address.ok()) c.tcp_address = *std::move(address);
       return address.status();
     }},
    {"token-file", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.token_file, v);
     }},
    {"tls-cert", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.tls_cert, v);
     }},
    {"tls-key", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.tls_key, v);
     }},
    {"cache-dir", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.cache_dir, v);
     }},
    {"no-cache", true, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       absl::StatusOr<bool> on = ParseSwitch(f, v);
       if (on.ok() && *on) c.cache_dir.clear();
       return on.status();
     }},
    {"cache-max-mb", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParseMegabytes(f, v, &c.cache_max_mb);
     }},
    {"threads", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParseCount(f, v, 0, std::numeric_limits<int>::max(), "a number >= 0", &c.threads);
     }},
    {"constant-grace-s", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParseCount(f, v, 0, std::numeric_limits<int>::max(), "a number of seconds >= 0",
                         &c.constant_grace_s);
     }},
    {"spin-us", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       if (!absl::SimpleAtoi(v, &c.spin_us) || c.spin_us < 0 || c.spin_us > 1'000'000) {
         return absl::InvalidArgumentError(
             absl::StrCat(f, " takes microseconds from 0 to 1000000, not '", v, "'"));
       }
       return absl::OkStatus();
     }},
    {"test-call-gate", false, true,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.test_call_gate, v);
     }},
    {"max-client-handles", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.limits.max_handles);
     }},
    {"max-client-templates", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.limits.max_templates);
     }},
    {"max-client-regions", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.limits.max_regions);
     }},
    {"max-client-channels", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.limits.max_channels);
     }},
    {"max-client-sessions", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.daemon_limits.max_client_sessions);
     }},
    {"max-sessions", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.daemon_limits.max_sessions);
     }},
    {"max-channels", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.daemon_limits.max_channels);
     }},
    {"max-graph-nodes", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParsePositive(f, v, &c.daemon_limits.max_graph_nodes);
     }},
    {"max-client-shm-mb", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       uint64_t mb = 0;
       if (absl::Status s = ParseMegabytes(f, v, &mb); !s.ok()) return s;
       c.limits.max_region_bytes = mb << 20;
       return absl::OkStatus();
     }},
    {"max-client-constant-mb", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       uint64_t mb = 0;
       if (absl::Status s = ParseMegabytes(f, v, &mb); !s.ok()) return s;
       c.limits.max_constant_bytes = mb << 20;
       return absl::OkStatus();
     }},
    {"log-level", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       if (!OneOf(v, kLevels)) {
         return absl::InvalidArgumentError(absl::StrCat(
             f, " takes one of trace, debug, info, warn, error, not '", v, "'"));
       }
       c.log_level = v;
       return absl::OkStatus();
     }},
    {"log-file", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.log_file, v);
     }},
    {"log-format", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       if (!OneOf(v, kLogFormats)) {
         return absl::InvalidArgumentError(
             absl::StrCat(f, " takes text or json, not '", v, "'"));
       }
       c.log_format = v;
       return absl::OkStatus();
     }},
    {"idle-exit-min", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       // A year is far past any useful idle time; the bound keeps the
       // duration arithmetic finite.
       double min = 0;
       if (!absl::SimpleAtod(v, &min) || !std::isfinite(min) || min < 0 || min > 525'600) {
         return absl::InvalidArgumentError(absl::StrCat(
             f, " takes minutes from 0 to 525600 (fractions allowed), not '", v, "'"));
       }
       c.idle_exit_min = min;
       return absl::OkStatus();
     }},
    {"metrics-port", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) {
       return ParseCount(f, v, 0, 65535, "a TCP port from 0 (off) to 65535", &c.metrics_port);
     }},
    {"remote-cache", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.remote_cache.url, v);
     }},
    {"remote-cache-key-file", false, false,
     [](DaemonConfig& c, const std::string&, const std::string& v) {
       return SetString(&c.remote_cache.key_file, v);
     }},
    {"remote-cache-prefix", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       if (v.empty() || v.size() > 200) {
         return absl::InvalidArgumentError(absl::StrCat(f, " takes 1 to 200 characters"));
       }
       c.remote_cache.key_prefix = v;
       return absl::OkStatus();
     }},
    {"remote-cache-ttl-s", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       int seconds = 0;
       absl::Status s = ParseCount(f, v, 0, std::numeric_limits<int>::max(),
                                   "a number of seconds >= 0", &seconds);
       c.remote_cache.ttl_s = seconds;
       return s;
     }},
    {"remote-cache-timeout-ms", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       int ms = 0;
       absl::Status s = ParseCount(f, v, 1, 600'000, "milliseconds from 1 to 600000", &ms);
       c.remote_cache.timeout_ms = ms;
       return s;
     }},
    {"remote-cache-max-value-mb", false, false,
     [](DaemonConfig& c, const std::string& f, const std::string& v) -> absl::Status {
       int mb = 0;
       absl::Status s = ParseCount(f, v, 1, 1 << 20, "a number of MiB >= 1", &mb);
       c.remote_cache.max_value_bytes = int64_t{mb} << 20;
       return s;
     }},
};

const FlagSpec* FindFlag(std::string_view name) {
  for (const FlagSpec& flag : kFlags) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

// Applies argv's flags to `config`, in order (a later flag wins).
absl::Status ApplyCommandLine(int argc, char** argv, DaemonConfig* config) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::optional<std::string> value;
    if (auto eq = arg.find('='); eq != std::string_view::npos && arg.substr(0, 2) == "--") {
      value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
    }
    if (arg == "-h") arg = "--help";
    const FlagSpec* flag = arg.substr(0, 2) == "--" ? FindFlag(arg.substr(2)) : nullptr;
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", std::string(arg), "' (see --help)"));
    }
    if (!value) {
      if (flag->is_switch) {
        value = "true";
      } else if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(std::string(arg), " needs a value"));
      } else {
        value = argv[++i];
      }
    }
    if (absl::Status s = flag->set(*config, std::string(arg), *value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Applies a config file's entries to `config`; errors name the file and line.
absl::Status ApplyConfigFile(const std::string& path, DaemonConfig* config) {
  absl::StatusOr<std::vector<ConfigEntry>> entries = ReadConfigFile(path);
  if (!entries.ok()) return absl::InvalidArgumentError(entries.status().message());
  for (const ConfigEntry& entry : *entries) {
    auto fail = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", entry.line, ": ", why));
    };
    const FlagSpec* flag = FindFlag(entry.key);
    if (flag == nullptr) {
      return fail(absl::StrCat("unknown key '", entry.key,
                               "' (keys are kilnd's long flag names without the dashes; "
                               "see kilnd --help)"));
    }
    if (flag->command_line_only) {
      return fail(absl::StrCat("'", entry.key, "' can only be given on the command line"));
    }
    if (absl::Status s = flag->set(*config, absl::StrCat("--", entry.key), entry.value); !s.ok()) {
      return fail(s.message());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseFlags(int argc, char** argv) {
  DaemonConfig config;
  config.socket_path = DefaultSocketPath();
  config.cache_dir = DefaultCacheDir();
  if (std::string lvl = Env("KILN_LOG_LEVEL"); !lvl.empty()) config.log_level = lvl;
  if (std::string fmt = Env("KILN_LOG_FORMAT"); !fmt.empty()) config.log_format = fmt;
  config.token_file = Env("KILN_TOKEN_FILE");
  config.config_file = Env("KILN_CONFIG_FILE");
  config.remote_cache.url = Env("KILN_REMOTE_CACHE");
  config.remote_cache.key_file = Env("KILN_REMOTE_CACHE_KEY_FILE");
  if (std::string mb = Env("KILN_CACHE_MAX_MB"); !mb.empty()) {
    if (absl::Status s = ParseMegabytes("KILN_CACHE_MAX_MB", mb, &config.cache_max_mb); !s.ok()) return s;
  }
  // The command line alone first: it names the config file (and with
  // --help or --version no file is read). The file then goes on top of the
  // environment, and the command line on top of the file.
  DaemonConfig command_line = config;
  if (absl::Status s = ApplyCommandLine(argc, argv, &command_line); !s.ok()) return s;
  if (command_line.help || command_line.version || command_line.config_file.empty()) {
    config = std::move(command_line);
  } else {
    if (absl::Status s = ApplyConfigFile(command_line.config_file, &config); !s.ok()) return s;
    if (absl::Status s = ApplyCommandLine(argc, argv, &config); !s.ok()) return s;
  }
  // Flags and config-file values were checked as they were set; these
  // can only have come from the environment.
  if (!OneOf(config.log_level, kLevels)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log level '", config.log_level,
        "' (KILN_LOG_LEVEL) is not one of trace, debug, info, warn, error"));
  }
  if (!OneOf(config.log_format, kLogFormats)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log format '", config.log_format, "' (KILN_LOG_FORMAT) is not text or json"));
  }
  if (!config.tcp_address.empty() && config.token_file.empty()) {
    return absl::InvalidArgumentError(
        "--tcp needs --token-file (or KILN_TOKEN_FILE): TCP clients are not checked otherwise");
  }
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!config.tls_cert.empty() && config.tcp_address.empty()) {
    return absl::InvalidArgumentError("--tls-cert/--tls-key apply to TCP: give --tcp too");
  }
  if (config.socket_path.size() >= 108) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path '", config.socket_path, "' is longer than a unix socket allows (107 bytes)"));
  }
  return config;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("token file ", path, " does not exist"));
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "token file ", path, " must belong to this user and be closed to others (chmod 600)"));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("token in ", path, " is shorter than 16 characters"));
  }
  return token;
}

}  // namespace kiln::server
