#include "server/daemon_config.h"

#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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
      "  --tcp HOST:PORT    also listen on TCP (off by default; no authentication yet:\n",
      "                     use only on trusted networks).\n",
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
  if (config.socket_path.size() >= 108) {
    return absl::InvalidArgumentError(absl::StrCat(
        "socket path '", config.socket_path, "' is longer than a unix socket allows (107 bytes)"));
  }
  return config;
}

}  // namespace kiln::server
