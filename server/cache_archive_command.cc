#include "server/cache_archive_command.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cache/artifact_store.h"
#include "cache/cache_archive.h"
#include "cache/cache_key.h"
#include "cache/constant_files.h"
#include "server/daemon_config.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

constexpr char kUsage[] =
    "Usage:\n"
    "  kilnd cache-export [--cache-dir DIR] [--key-file FILE] [--key PREFIX]...\n"
    "                     [--used-within-s N] ARCHIVE\n"
    "  kilnd cache-import [--cache-dir DIR] [--key-file FILE] [--cache-max-mb N] ARCHIVE\n\n"
    "cache-export writes the compiled graphs of DIR (default: the daemon's cache\n"
    "directory), the constants they use and the client's lowering entries to ARCHIVE,\n"
    "each sealed under the key in FILE (64 hex digits, mode 0600: openssl rand -hex 32;\n"
    "default: $KILN_REMOTE_CACHE_KEY_FILE, the fleet's key).\n"
    "--key PREFIX (repeatable) takes only the graphs whose key starts with PREFIX (as\n"
    "`kiln cache ls` shows them) and their constants; --used-within-s N only what was\n"
    "used in the last N seconds.\n"
    "cache-import checks every record of ARCHIVE under the key in FILE and writes those\n"
    "that open into DIR, under DIR's own key; --cache-max-mb caps DIR as kilnd does\n"
    "(default 2048, 0: none).\n";

struct Args {
  std::string command, cache_dir, key_file, archive;
  std::vector<std::string> prefixes;
  int64_t used_within_s = 0;
  uint64_t cache_max_mb = 2048;
};

int BadFlags(const std::string& why) {
  std::fprintf(stderr, "kilnd %s\n\n%s", why.c_str(), kUsage);
  return 2;
}

std::string Megabytes(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

std::string Summary(const cache::ArchiveCounts& c) {
  return absl::StrCat(c.artifacts, " compiled graphs, ", c.derived, " derived constants, ",
                      c.uploaded, " client constants, ", c.lowerings, " lowering entries (",
                      Megabytes(c.bytes), ")");
}

}  // namespace

bool IsCacheArchiveCommand(std::string_view arg) {
  return arg == "cache-export" || arg == "cache-import";
}

int RunCacheArchiveCommand(int argc, char** argv) {
  Args args;
  args.command = argv[1];
  const bool exporting = args.command == "cache-export";
  args.cache_dir = DefaultCacheDir();
  // The fleet's key is the natural archive key: the same people trust both.
  if (const char* env = std::getenv("KILN_REMOTE_CACHE_KEY_FILE")) args.key_file = env;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const bool takes_value = arg == "--cache-dir" || arg == "--key-file" ||
                             (exporting && (arg == "--key" || arg == "--used-within-s")) ||
                             (!exporting && arg == "--cache-max-mb");
    if (takes_value) {
      if (i + 1 >= argc) return BadFlags(absl::StrCat(args.command, ": ", arg, " needs a value"));
      const std::string value = argv[++i];
      if (arg == "--cache-dir") args.cache_dir = value;
      if (arg == "--key-file") args.key_file = value;
      if (arg == "--key") args.prefixes.push_back(value);
      if (arg == "--used-within-s" &&
          (!absl::SimpleAtoi(value, &args.used_within_s) || args.used_within_s <= 0)) {
        return BadFlags(absl::StrCat(args.command, ": --used-within-s takes a number >= 1, not '",
                                     value, "'"));
      }
      if (arg == "--cache-max-mb" && !absl::SimpleAtoi(value, &args.cache_max_mb)) {
        return BadFlags(absl::StrCat(args.command, ": --cache-max-mb takes a number, not '",
                                     value, "'"));
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return BadFlags(absl::StrCat(args.command, ": unknown flag ", arg));
    } else if (args.archive.empty()) {
      args.archive = arg;
    } else {
      return BadFlags(absl::StrCat(args.command, ": one ARCHIVE, not also '", arg, "'"));
    }
  }
  if (args.archive.empty()) return BadFlags(absl::StrCat(args.command, ": no ARCHIVE given"));
  if (args.key_file.empty()) {
    return BadFlags(absl::StrCat(args.command,
                                 ": no --key-file given (nor KILN_REMOTE_CACHE_KEY_FILE)"));
  }
  if (args.cache_dir.empty()) return BadFlags(absl::StrCat(args.command, ": no --cache-dir given"));

  // Rejected entries and records are reported as they are met.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kilnd"));
  spdlog::set_level(spdlog::level::warn);
  absl::StatusOr<cache::CacheKey> key = cache::ReadKeyFile(args.key_file);
  if (!key.ok()) {
    std::fprintf(stderr, "kilnd %s: %s\n", args.command.c_str(),
                 std::string(key.status().message()).c_str());
    return 1;
  }
  cache::ArtifactStore store(args.cache_dir, args.cache_max_mb << 20);
  cache::ConstantFiles files(&store);
  absl::StatusOr<cache::ArchiveCounts> counts =
      exporting ? cache::ExportCache(&store, &files, *key,
                                     cache::ArchiveSelection{args.prefixes, args.used_within_s},
                                     args.archive)
                : cache::ImportCache(&store, &files, *key, args.archive);
  if (!counts.ok()) {
    std::fprintf(stderr, "kilnd %s: %s\n", args.command.c_str(),
                 std::string(counts.status().message()).c_str());
    return 1;
  }
  if (exporting) {
    std::printf("exported %s from %s to %s\n", Summary(*counts).c_str(), args.cache_dir.c_str(),
                args.archive.c_str());
  } else {
    std::printf("imported %s from %s into %s\n", Summary(*counts).c_str(), args.archive.c_str(),
                args.cache_dir.c_str());
  }
  if (counts->refused > 0) {
    std::printf("%s %llu %s (see the messages above)\n", exporting ? "skipped" : "refused",
                static_cast<unsigned long long>(counts->refused),
                exporting ? "entries that failed their checks" : "records that did not open");
    return 1;
  }
  return 0;
}

}  // namespace kiln::server
