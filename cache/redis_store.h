// The remote tier: compiled-graph entries and derived weights shared by
// every daemon of a fleet through one Redis (hiredis), behind each
// daemon's own cache directory. Memory, then the cache directory, then
// here; what a compile makes is published here too.
//
// Untrusted: every value is sealed under the fleet's key
// (cache/remote_value.h) and opened before use; a value that does not open
// is a miss (logged), never used. Redis being down, slow or full costs a
// warning and a local compile, never an error or a hang: every call has a
// deadline (the connection's send and receive timeouts), and after a
// failure the tier stays off for a while instead of making every compile
// wait out another timeout.
//
// Layout, under the configured prefix (default "kiln:"), where <id> is the
// SHA-256 of the compiler version, the CPU features and the name (so
// daemons of other builds or CPUs in one fleet never meet):
//   <prefix><kind>:<id>           a sealed value, or when larger than one
//                                 chunk a manifest "KILNCHK\0" | u32 count
//                                 | u64 bytes, and its chunks at
//   <prefix><kind>:<id>#<i>       i = 0 .. count-1
//   <prefix>lock:<id>             single flight: who compiles <name>
// Values are written chunks first, manifest last, each with the TTL when
// one is set; a reader missing a chunk has a miss.
//
// Thread-safe: calls share one connection, one at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cache/cache_key.h"
#include "cache/remote_cache_config.h"

struct redisContext;

namespace kiln::cache {

struct RemoteStats {
  std::atomic<uint64_t> hits{0}, misses{0}, errors{0}, refused{0};
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0};
};

class RedisStore {
 public:
  // The URL parsed, the key file read and checked: INVALID_ARGUMENT or
  // PERMISSION_DENIED saying what is wrong. Does not connect (Redis may
  // come up later).
  static absl::StatusOr<std::unique_ptr<RedisStore>> Create(const RemoteCacheConfig& config);
  ~RedisStore();
  RedisStore(const RedisStore&) = delete;
  RedisStore& operator=(const RedisStore&) = delete;

  // The payload sealed under `kind`/`name`, opened; nullopt on a miss, a
  // value that does not open (logged, counted as refused) or Redis
  // unavailable (logged once per outage).
  std::optional<std::string> Get(absl::string_view kind, const std::string& name);
  // Get for a large payload: written, reply by reply, into the memory
  // `allocate(payload bytes)` returns (null: none, a miss) rather than
  // through strings, and checked there; null on a miss, refusal or outage,
  // as Get. A weight of hundreds of MB then crosses in one copy.
  std::shared_ptr<uint8_t> GetInto(
      absl::string_view kind, const std::string& name,
      absl::FunctionRef<std::shared_ptr<uint8_t>(uint64_t)> allocate);
  // Whether a value is stored under `kind`/`name` now (not whether it
  // opens: Get says that); false when Redis is unavailable.
  bool Has(absl::string_view kind, const std::string& name);
  // Seals and writes `payload`; failures are logged and counted, not
  // returned: the tier is an optimization.
  void Put(absl::string_view kind, const std::string& name, absl::string_view payload);

  // Fleet-wide single flight over `name`: true when this daemon now holds
  // the lock (for `ttl`, after which another may take it: a holder that
  // dies does not block the fleet), false when another does. When Redis
  // is unavailable nobody holds it: true.
  bool TryLock(const std::string& name, std::chrono::milliseconds ttl);
  // Extends the lock to `ttl` from now if this daemon still holds it.
  void Renew(const std::string& name, std::chrono::milliseconds ttl);
  // Gives the lock up if this daemon still holds it.
  void Unlock(const std::string& name);
  // Whether another daemon holds `name`'s lock now.
  bool Locked(const std::string& name);

  const RemoteStats& stats() const { return stats_; }
  // The URL with any password hidden, for logs and stats.
  const std::string& display_url() const { return display_url_; }

 private:
  struct Target {
    std::string host;  // empty with a unix socket
    int port = 6379;
    std::string unix_path;
    std::string user, password;
    int db = 0;
  };
  RedisStore(RemoteCacheConfig config, Target target, CacheKey key, std::string display_url);

  // A live connection, or null while the tier is off after a failure.
  redisContext* Connection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the connection and turns the tier off for a while; logs `why`
  // once per outage.
  void Fail(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GET, handing the value's bytes to `take` while the reply holds them:
  // false for no value, `take`'s error, or an error status when Redis
  // failed.
  absl::StatusOr<bool> GetRawInto(const std::string& key,
                                  absl::FunctionRef<absl::Status(absl::string_view)> take)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts and logs a value that did not open, and deletes it.
  void Refuse(const std::string& key, absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetRaw(const std::string& key, absl::string_view value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string KeyOf(absl::string_view kind, const std::string& name) const;
  bool Exists(const std::string& key);

  const RemoteCacheConfig config_;
  const Target target_;
  const CacheKey key_;
  const std::string display_url_;
  // Identifies this daemon's locks: only the holder unlocks.
  const std::string owner_;
  RemoteStats stats_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::chrono::steady_clock::time_point off_until_ ABSL_GUARDED_BY(mu_);
  bool outage_logged_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kiln::cache
