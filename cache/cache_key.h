// The secret that authenticates the constants a daemon derives (folded,
// packed) in the cache directory: each such file carries a MAC under it
// (cache/digest.h, cache/constant_files.h), so a derived file that no
// holder of the key wrote is never used. The 32 bytes are an AES-256 key.
//
// The key lives in a file, so that every daemon sharing the directory
// (restarts, several daemons of one user) uses the same one: the first
// daemon to find none creates it (random, mode 0600) and publishes it with
// link(2), which never replaces a key another daemon published meanwhile;
// everyone then reads the one published. File: 64 lowercase hex digits
// and a newline.
//
// Stateless and thread-safe.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "cache/digest.h"

namespace kiln::cache {

using CacheKey = Digest;

// The key file's name in the cache directory.
inline constexpr char kCacheKeyFile[] = "cache.key";

// The key in the file `name` of the directory `dir` (shown as `path`),
// created first if there is none. The file must be a regular file of the
// daemon's user that nobody else may read or write (its group and others
// have no permission bits) and hold exactly a key: PERMISSION_DENIED or
// DATA_LOSS saying why otherwise, and the caller uses no derived constant.
absl::StatusOr<CacheKey> LoadOrCreateCacheKey(int dir, const std::string& name,
                                              const std::string& path);

// The key in the file `name` of `dir`, checked as above; NOT_FOUND when
// there is none.
absl::StatusOr<CacheKey> ReadCacheKey(int dir, const std::string& name, const std::string& path);

// A key given in the file at `path` (the fleet's, kilnd --remote-cache-key-file;
// a cache archive's, cache/cache_archive.h): 64 lowercase hex digits and an
// optional newline (openssl rand -hex 32), in a regular file (links
// followed) of the daemon's user or root that others may not read and only
// its owner may write (0600, or a Kubernetes Secret's 0440 under the pod's
// fsGroup).
absl::StatusOr<CacheKey> ReadKeyFile(const std::string& path);

}  // namespace kiln::cache
