#include "server/daemon_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"

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
      "kilnd ", KILN_RUNTIME_VERSION, " - the Kiln compile-and-execute daemon\n\n",
      "Usage: kilnd [flags]\n\n",
      "Flags:\n",
      "  --socket PATH      unix socket to listen on (default: $KILN_SOCKET, else\n",
      "                     $XDG_RUNTIME_DIR/kiln/kilnd.sock, else /tmp/kiln-<uid>/kilnd.sock;\n",
      "                     now: ", DefaultSocketPath(), ").\n",
      "                     Its directory is created with mode 0700; <PATH>.lock is held\n",
      "                     exclusively so a second daemon cannot take the socket over.\n",
      "  --tcp HOST:PORT    also listen on TCP (off by default). Needs --token-file: every\n",
      "                     TCP call must carry the token (clients: option 'token' or\n",
      "                     KILN_TOKEN). Unix-socket clients are checked by their\n",
      "                     credentials instead: only this user's processes may connect.\n",
      "  --token-file PATH  file holding the TCP token (at least 16 characters; mode 0600;\n",
      "                     env KILN_TOKEN_FILE).\n",
      "  --tls-cert PATH, --tls-key PATH\n",
      "                     PEM certificate chain and private key: TCP is served over TLS\n",
      "                     (clients: option 'tls_ca' or KILN_TLS_CA).\n",
      "  --cache-dir DIR    compiled-graph cache (default: $KILN_CACHE_DIR, else\n",
      "                     $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; now: ", DefaultCacheDir(), ").\n",
      "  --no-cache         do not read or write the on-disk cache.\n",
      "  --cache-max-mb N   cap on the cache's total size in MiB (default: $KILN_CACHE_MAX_MB,\n",
      "                     else 2048; 0: no cap). Past it, the least recently used entries\n",
      "                     (by file mtime, which a cache hit updates) are deleted.\n",
      "  --threads N        threads for execution (default 0: all cores): how many runs\n",
      "                     go at once, the size of a graph's thread arena by default,\n",
      "                     and the most a client's config num_threads gets.\n",
      "  --constant-grace-s N  keep an uploaded weight no compiled graph holds (a graph\n",
      "                     holds only what its runs read, not weights it packed) for N\n",
      "                     seconds after its last use (default 60); clients upload again.\n",
      "  --spin-us N        after a run, the threads that ran it with the calling one spin\n",
      "                     up to N microseconds waiting for the next run before sleeping\n",
      "                     (default 2000; 0: sleep at once). A thread that slept wakes\n",
      "                     into the next run late: that run starts on fewer threads.\n",
      "  --max-client-handles N       compiled-graph handles one client may hold (default 4096).\n",
      "  --max-client-shm-mb N        shared memory one client may register, MiB (default 65536).\n",
      "  --max-client-constant-mb N   new constant bytes one client may upload, MiB\n",
      "                     (default 65536). Past a cap the request fails with\n",
      "                     RESOURCE_EXHAUSTED naming the numbers; nothing else changes.\n",
      "  --log-level LEVEL  trace, debug, info, warn, error (default info; env KILN_LOG_LEVEL).\n",
      "  --log-file PATH    append logs to PATH instead of stderr.\n",
      "  --version          print the runtime version and exit.\n",
      "  --help             print this text and exit.\n\n",
      "Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 2 bad flags, 3 another daemon\n",
      "holds the socket's lock, 1 other startup failure.\n");
}

absl::StatusOr<DaemonConfig> ParseFlags(int argc, char** argv) {
  DaemonConfig config;
  config.socket_path = DefaultSocketPath();
  config.cache_dir = DefaultCacheDir();
  if (std::string lvl = Env("KILN_LOG_LEVEL"); !lvl.empty()) config.log_level = lvl;
  config.token_file = Env("KILN_TOKEN_FILE");
  if (std::string mb = Env("KILN_CACHE_MAX_MB"); !mb.empty()) {
    if (absl::Status s = ParseMegabytes("KILN_CACHE_MAX_MB", mb, &config.cache_max_mb); !s.ok()) return s;
  }
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string_view::npos && arg.substr(0, 2) == "--") {
      value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
      has_value = true;
    }
    auto next = [&](std::string* out) -> absl::Status {
      if (has_value) {
        *out = value;
        return absl::OkStatus();
      }
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(std::string(arg), " needs a value"));
      *out = argv[++i];
      return absl::OkStatus();
    };
    absl::Status s;
    if (arg == "--help" || arg == "-h") {
      config.help = true;
    } else if (arg == "--version") {
      config.version = true;
    } else if (arg == "--socket") {
      s = next(&config.socket_path);
    } else if (arg == "--tcp") {
      s = next(&config.tcp_address);
    } else if (arg == "--token-file") {
      s = next(&config.token_file);
    } else if (arg == "--tls-cert") {
      s = next(&config.tls_cert);
    } else if (arg == "--tls-key") {
      s = next(&config.tls_key);
    } else if (arg == "--max-client-handles") {
      std::string n;
      s = next(&n);
      if (s.ok() && (!absl::SimpleAtoi(n, &config.limits.max_handles) ||
                     config.limits.max_handles == 0)) {
        s = absl::InvalidArgumentError(
            absl::StrCat("--max-client-handles takes a number >= 1, not '", n, "'"));
      }
    } else if (arg == "--max-client-shm-mb" || arg == "--max-client-constant-mb") {
      std::string n;
      uint64_t mb = 0;
      s = next(&n);
      if (s.ok()) s = ParseMegabytes(std::string(arg), n, &mb);
      if (s.ok()) {
        (arg == "--max-client-shm-mb" ? config.limits.max_region_bytes
                                      : config.limits.max_constant_bytes) = mb << 20;
      }
    } else if (arg == "--cache-dir") {
      s = next(&config.cache_dir);
    } else if (arg == "--cache-max-mb") {
      std::string n;
      s = next(&n);
      if (s.ok()) s = ParseMegabytes("--cache-max-mb", n, &config.cache_max_mb);
    } else if (arg == "--no-cache") {
      config.cache_dir.clear();
    } else if (arg == "--log-level") {
      s = next(&config.log_level);
    } else if (arg == "--log-file") {
      s = next(&config.log_file);
    } else if (arg == "--threads") {
      std::string n;
      s = next(&n);
      if (s.ok() && (!absl::SimpleAtoi(n, &config.threads) || config.threads < 0)) {
        s = absl::InvalidArgumentError(absl::StrCat("--threads takes a number >= 0, not '", n, "'"));
      }
    } else if (arg == "--constant-grace-s") {
      std::string n;
      s = next(&n);
      if (s.ok() && (!absl::SimpleAtoi(n, &config.constant_grace_s) ||
                     config.constant_grace_s < 0)) {
        s = absl::InvalidArgumentError(
            absl::StrCat("--constant-grace-s takes a number of seconds >= 0, not '", n, "'"));
      }
    } else if (arg == "--spin-us") {
      std::string n;
      s = next(&n);
      if (s.ok() && (!absl::SimpleAtoi(n, &config.spin_us) || config.spin_us < 0 ||
                     config.spin_us > 1'000'000)) {
        s = absl::InvalidArgumentError(
            absl::StrCat("--spin-us takes microseconds from 0 to 1000000, not '", n, "'"));
      }
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("unknown flag '", std::string(arg), "' (see --help)"));
    }
    if (!s.ok()) return s;
  }
  static const char* kLevels[] = {"trace", "debug", "info", "warn", "error"};
  bool level_ok = false;
  for (const char* l : kLevels) level_ok |= config.log_level == l;
  if (!level_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "log level '", config.log_level, "' is not one of trace, debug, info, warn, error"));
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
