// A cache archive: chosen entries of a cache directory, the constants they
// use and the client's lowering entries, in one file that another
// directory imports (`kiln cache export` / `kiln cache import`, which run
// `kilnd cache-export` / `cache-import`): a container image or a CI
// artifact then carries a warm cache.
//
// File   = magic "KILNPAK\0" | u32 format | u32 len + compiler version |
//          u32 len + CPU features | records | end record
// Record = u8 kind | u32 name length | name | u64 value length | value
// End    = u8 0 | u32 0 | u64 the number of records before it
// (little-endian). Each value is sealed (cache/remote_value.h) under the
// archive's key for its kind and name:
//   1 "artifact"  a compiled-graph entry's payload, named by its graph key
//   2 "derived"   a derived constant, named by its key
//   3 "uploaded"  a client's constant, named "h:<sha256 of its bytes>"
//   4 "lowering"  a client lowering entry's whole file, named by its key
//
// Trust: an archive is input from wherever it was copied. The export reads
// only what passes the directory's own checks (MACs under its key,
// hashes) and seals every record under the archive key, a key file like
// the fleet's (cache/cache_key.h, ReadKeyFile). The import opens each
// record under that key, and checks what its kind allows (a graph key's
// form, a client constant's hash, an artifact that parses) before writing
// it through the stores, which seal it again under the destination
// directory's key. A record that fails is refused, counted and reported,
// and nothing of it is written; the others still import. An archive made
// by another compiler or for another CPU is refused whole: no key of that
// compiler or CPU is ever looked up here.
//
// Stateless; the stores it writes through are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/artifact_store.h"
#include "cache/cache_key.h"
#include "cache/constant_files.h"

namespace kiln::cache {

inline constexpr uint32_t kCacheArchiveFormat = 1;

// What to export; the default is everything in the directory.
struct ArchiveSelection {
  // Entries whose graph key starts with one of these (hex, as `kiln cache
  // ls` shows them); empty: every entry. With prefixes, only the constants
  // the chosen entries use go in, and no lowering entry (a lowering entry
  // does not say which graphs it leads to).
  std::vector<std::string> key_prefixes;
  // Only entries (and lowering entries) used within this many seconds;
  // 0: any age.
  int64_t used_within_s = 0;
};

struct ArchiveCounts {
  uint64_t artifacts = 0, derived = 0, uploaded = 0, lowerings = 0;
  uint64_t bytes = 0;    // payload bytes of the records counted above
  uint64_t refused = 0;  // records refused (import), entries that failed checks (export)
};

// Writes the archive of `store`'s directory (through `files` for its
// constants) to `path`, via a temporary renamed into place.
// FAILED_PRECONDITION when the directory cannot be read as a cache;
// INTERNAL when `path` cannot be written.
absl::StatusOr<ArchiveCounts> ExportCache(ArtifactStore* store, ConstantFiles* files,
                                          const CacheKey& archive_key,
                                          const ArchiveSelection& selection,
                                          const std::string& path);

// Imports the archive at `path` into `store`'s directory (through `files`,
// whose writes are flushed before this returns). NOT_FOUND or
// INVALID_ARGUMENT when `path` is no readable archive; FAILED_PRECONDITION
// when it is another compiler's or CPU's, or the directory cannot be
// written; DATA_LOSS when it ends before its end record (what came before
// is imported). Refused records are counted, not errors.
absl::StatusOr<ArchiveCounts> ImportCache(ArtifactStore* store, ConstantFiles* files,
                                          const CacheKey& archive_key, const std::string& path);

}  // namespace kiln::cache
