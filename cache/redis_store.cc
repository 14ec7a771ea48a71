#include "cache/redis_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <hiredis/hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cache/cache_dir.h"
#include "cache/compiler_version.h"
#include "cache/remote_value.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

constexpr char kChunkMagic[8] = {'K', 'I', 'L', 'N', 'C', 'H', 'K', '\0'};
constexpr size_t kManifestBytes = 8 + 4 + 8;
// No more pieces than this per value, whatever a manifest says.
constexpr uint32_t kMaxChunks = 1 << 16;
// After a failure the tier stays off this long before a call tries again.
constexpr std::chrono::seconds kRetryAfter{5};
// Extends the lock only when it is still ours.
constexpr char kRenewScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], "
    "ARGV[2]) else return 0 end";
// Gives up the lock only when it is still ours.
constexpr char kUnlockScript[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end";

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval Timeval(int64_t ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
  return tv;
}

absl::Status Refused(const std::string& url, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--remote-cache ", url, ": ", why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisStore>> RedisStore::Create(const RemoteCacheConfig& config) {
  const std::string& url = config.url;
  Target target;
  std::string display;
  constexpr absl::string_view kRedis = "redis://", kUnix = "unix://";
  absl::string_view rest(url);
  if (absl::StartsWith(rest, "rediss://")) {
    return Refused(url, "TLS (rediss://) needs hiredis 1.0 or later, and this kilnd is built "
                        "with Debian 12's hiredis 0.14: reach Redis through a TLS tunnel on "
                        "loopback (stunnel, spiped) and give the tunnel's redis:// address");
  }
  if (absl::ConsumePrefix(&rest, kUnix)) {
    const size_t query = rest.find('?');
    target.unix_path = std::string(rest.substr(0, query));
    if (query != absl::string_view::npos) {
      absl::string_view q = rest.substr(query + 1);
      if (!absl::ConsumePrefix(&q, "db=") || !absl::SimpleAtoi(q, &target.db)) {
        return Refused(url, "the only query a unix:// address takes is ?db=N");
      }
    }
    if (target.unix_path.empty() || target.unix_path[0] != '/') {
      return Refused(url, "a unix:// address names an absolute socket path");
    }
    display = url;
  } else if (absl::ConsumePrefix(&rest, kRedis)) {
    const size_t at = rest.rfind('@');
    std::string shown_user;
    if (at != absl::string_view::npos) {
      absl::string_view userinfo = rest.substr(0, at);
      rest.remove_prefix(at + 1);
      const size_t colon = userinfo.find(':');
      if (colon == absl::string_view::npos) {
        target.user = std::string(userinfo);
      } else {
        target.user = std::string(userinfo.substr(0, colon));
        target.password = std::string(userinfo.substr(colon + 1));
      }
      shown_user = absl::StrCat(target.user, target.password.empty() ? "" : ":***", "@");
    }
    const size_t slash = rest.find('/');
    absl::string_view hostport = rest.substr(0, slash);
    if (slash != absl::string_view::npos) {
      absl::string_view db = rest.substr(slash + 1);
      if (!db.empty() && (!absl::SimpleAtoi(db, &target.db) || target.db < 0)) {
        return Refused(url, "the path after host:port is a database number");
      }
    }
    absl::string_view host = hostport, port;
    if (absl::StartsWith(hostport, "[")) {  // [IPv6]:port
      const size_t close = hostport.find(']');
      if (close == absl::string_view::npos) return Refused(url, "unclosed '[' in the host");
      host = hostport.substr(1, close - 1);
      absl::string_view after = hostport.substr(close + 1);
      if (absl::ConsumePrefix(&after, ":")) port = after;
    } else if (const size_t colon = hostport.rfind(':'); colon != absl::string_view::npos) {
      host = hostport.substr(0, colon);
      port = hostport.substr(colon + 1);
    }
    if (host.empty()) return Refused(url, "no host");
    target.host = std::string(host);
    if (!port.empty() &&
        (!absl::SimpleAtoi(port, &target.port) || target.port <= 0 || target.port > 65535)) {
      return Refused(url, "the port is not a number from 1 to 65535");
    }
    display = absl::StrCat("redis://", shown_user, hostport,
                           target.db != 0 ? absl::StrCat("/", target.db) : "");
  } else {
    return Refused(url, "not a redis://host:port[/db] or unix:///path address");
  }
  if (config.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--remote-cache needs --remote-cache-key-file: what a daemon reads from Redis is used "
        "only when sealed under the fleet's key");
  }
  absl::StatusOr<CacheKey> key = ReadKeyFile(config.key_file);
  if (!key.ok()) {
    return absl::Status(key.status().code(),
                        absl::StrCat("--remote-cache-key-file: ", key.status().message()));
  }
  if (config.timeout_ms <= 0 || config.chunk_bytes <= 0 || config.max_value_bytes <= 0 ||
      config.ttl_s < 0) {
    return absl::InvalidArgumentError(
        "remote cache: the timeout, chunk and value sizes must be positive, the TTL not negative");
  }
  return std::unique_ptr<RedisStore>(
      new RedisStore(config, std::move(target), *key, std::move(display)));
}

RedisStore::RedisStore(RemoteCacheConfig config, Target target, CacheKey key,
                       std::string display_url)
    : config_(std::move(config)),
      target_(std::move(target)),
      key_(key),
      display_url_(std::move(display_url)),
      owner_([] {
        char host[256] = {};
        ::gethostname(host, sizeof(host) - 1);
        std::random_device rd;
        return absl::StrCat(host, ":", ::getpid(), ":", rd(), rd());
      }()) {}

RedisStore::~RedisStore() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) redisFree(context_);
}

std::string RedisStore::KeyOf(absl::string_view kind, const std::string& name) const {
  // Builds and CPUs of one fleet keep apart: a value is only ever read by
  // daemons that would have written the same bytes.
  return absl::StrCat(config_.key_prefix, kind, ":",
                      runtime::Sha256Hex(absl::StrCat(CompilerVersion(), "\n",
                                                      runtime::CpuFeatureString(), "\n", name)));
}

void RedisStore::Fail(const std::string& why) {
  if (context_ != nullptr) {
    redisFree(context_);
    context_ = nullptr;
  }
  off_until_ = std::chrono::steady_clock::now() + kRetryAfter;
  stats_.errors++;
  if (!outage_logged_) {
    outage_logged_ = true;
    spdlog::warn("remote cache {}: {}; compiling locally until it answers", display_url_, why);
  }
}

redisContext* RedisStore::Connection() {
  if (context_ != nullptr && context_->err == 0) return context_;
  if (context_ != nullptr) {
    Fail(context_->errstr);
    return nullptr;
  }
  if (std::chrono::steady_clock::now() < off_until_) return nullptr;
  const timeval tv = Timeval(config_.timeout_ms);
  redisContext* c = target_.unix_path.empty()
                        ? redisConnectWithTimeout(target_.host.c_str(), target_.port, tv)
                        : redisConnectUnixWithTimeout(target_.unix_path.c_str(), tv);
  if (c == nullptr) {
    Fail("cannot allocate a connection");
    return nullptr;
  }
  context_ = c;
  if (c->err != 0) {
    Fail(absl::StrCat("cannot connect: ", c->errstr));
    return nullptr;
  }
  if (redisSetTimeout(c, tv) != REDIS_OK) {
    Fail("cannot set the connection's timeout");
    return nullptr;
  }
  // The reader keeps its buffer between replies (hiredis frees one past
  // 16 KiB when it empties): values come in chunks of megabytes, and a
  // buffer grown again for each would be fresh memory every time.
  c->reader->maxbuf = 0;
  auto simple = [&](Reply reply, const char* what) {
    if (!reply) {
      Fail(absl::StrCat(what, ": ", context_ != nullptr ? context_->errstr : "no reply"));
      return false;
    }
    if (reply->type == REDIS_REPLY_ERROR) {
      Fail(absl::StrCat(what, " refused: ", std::string(reply->str, reply->len)));
      return false;
    }
    return true;
  };
  if (!target_.password.empty()) {
    Reply reply(static_cast<redisReply*>(
        target_.user.empty()
            ? redisCommand(c, "AUTH %b", target_.password.data(), target_.password.size())
            : redisCommand(c, "AUTH %b %b", target_.user.data(), target_.user.size(),
                           target_.password.data(), target_.password.size())));
    if (!simple(std::move(reply), "AUTH")) return nullptr;
  }
  if (target_.db != 0) {
    Reply reply(static_cast<redisReply*>(redisCommand(c, "SELECT %d", target_.db)));
    if (!simple(std::move(reply), "SELECT")) return nullptr;
  }
  if (outage_logged_) {
    outage_logged_ = false;
    spdlog::info("remote cache {} answers again", display_url_);
  }
  return context_;
}

absl::StatusOr<bool> RedisStore::GetRawInto(
    const std::string& key, absl::FunctionRef<absl::Status(absl::string_view)> take) {
  redisContext* c = Connection();
  if (c == nullptr) return absl::UnavailableError("remote cache off");
  // The length first: a value larger than any this daemon would use is
  // not transferred.
  Reply len(static_cast<redisReply*>(redisCommand(c, "STRLEN %b", key.data(), key.size())));
  if (!len) {
    Fail(absl::StrCat("STRLEN: ", c->errstr));
    return absl::UnavailableError("remote cache failed");
  }
  if (len->type != REDIS_REPLY_INTEGER) {
    return absl::DataLossError("not a string value");
  }
  if (len->integer == 0) return false;
  if (static_cast<uint64_t>(len->integer) >
      static_cast<uint64_t>(config_.max_value_bytes) + kRemoteValueHeaderBytes) {
    return absl::DataLossError(absl::StrCat("value of ", len->integer, " bytes, over the cap"));
  }
  Reply got(static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size())));
  if (!got) {
    Fail(absl::StrCat("GET: ", c->errstr));
    return absl::UnavailableError("remote cache failed");
  }
  if (got->type == REDIS_REPLY_NIL) return false;
  if (got->type != REDIS_REPLY_STRING) return absl::DataLossError("not a string value");
  if (static_cast<uint64_t>(got->len) >
      static_cast<uint64_t>(config_.max_value_bytes) + kRemoteValueHeaderBytes) {
    return absl::DataLossError("value over the cap");
  }
  if (absl::Status taken = take(absl::string_view(got->str, got->len)); !taken.ok()) {
    return taken;
  }
  return true;
}

void RedisStore::Refuse(const std::string& key, absl::string_view why) {
  stats_.refused++;
  spdlog::warn("remote cache value {} refused ({}); removing it", key, std::string(why));
  if (redisContext* c = Connection()) {
    Reply removed(static_cast<redisReply*>(redisCommand(c, "DEL %b", key.data(), key.size())));
  }
}

absl::Status RedisStore::SetRaw(const std::string& key, absl::string_view value) {
  redisContext* c = Connection();
  if (c == nullptr) return absl::UnavailableError("remote cache off");
  Reply reply(static_cast<redisReply*>(
      config_.ttl_s > 0
          ? redisCommand(c, "SET %b %b EX %lld", key.data(), key.size(), value.data(),
                         value.size(), static_cast<long long>(config_.ttl_s))
          : redisCommand(c, "SET %b %b", key.data(), key.size(), value.data(), value.size())));
  if (!reply) {
    Fail(absl::StrCat("SET: ", c->errstr));
    return absl::UnavailableError("remote cache failed");
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    // Full (maxmemory with noeviction), read-only replica, ...: this value
    // is not written; the connection is fine.
    return absl::ResourceExhaustedError(std::string(reply->str, reply->len));
  }
  return absl::OkStatus();
}

std::optional<std::string> RedisStore::Get(absl::string_view kind, const std::string& name) {
  std::string payload;
  const std::shared_ptr<uint8_t> got = GetInto(kind, name, [&payload](uint64_t bytes) {
    payload.resize(bytes);
    return std::shared_ptr<uint8_t>(reinterpret_cast<uint8_t*>(payload.data()), [](uint8_t*) {});
  });
  if (got == nullptr) return std::nullopt;
  return payload;
}

std::shared_ptr<uint8_t> RedisStore::GetInto(
    absl::string_view kind, const std::string& name,
    absl::FunctionRef<std::shared_ptr<uint8_t>(uint64_t)> allocate) {
  const std::string key = KeyOf(kind, name);
  absl::MutexLock lock(&mu_);
  // The value's bytes in order, whole or chunk by chunk: its header into
  // `head`, then its payload into `out`, which `allocate` sizes from the
  // header once that is in.
  std::string head;
  RemoteValueHeader header;
  std::shared_ptr<uint8_t> out;
  uint64_t received = 0, filled = 0;
  auto take = [&](absl::string_view bytes) -> absl::Status {
    received += bytes.size();
    if (head.size() < kRemoteValueHeaderBytes) {
      const size_t n = std::min<size_t>(bytes.size(), kRemoteValueHeaderBytes - head.size());
      head.append(bytes.data(), n);
      bytes.remove_prefix(n);
      if (head.size() < kRemoteValueHeaderBytes) return absl::OkStatus();
      absl::StatusOr<RemoteValueHeader> read = ReadRemoteValueHeader(head);
      if (!read.ok()) return read.status();
      header = *read;
      if (header.payload_bytes > static_cast<uint64_t>(config_.max_value_bytes)) {
        return absl::DataLossError("a payload over the cap");
      }
      out = allocate(header.payload_bytes);
      if (out == nullptr) return absl::NotFoundError("not wanted");
    }
    if (bytes.size() > header.payload_bytes - filled) {
      return absl::DataLossError("longer than its header says");
    }
    std::memcpy(out.get() + filled, bytes.data(), bytes.size());
    filled += bytes.size();
    return absl::OkStatus();
  };
  auto miss = [&](const absl::Status& status) -> std::shared_ptr<uint8_t> {
    if (absl::IsDataLoss(status)) {
      Refuse(key, status.message());
    } else {
      stats_.misses++;
    }
    return nullptr;
  };
  bool chunked = false;
  uint32_t count = 0;
  uint64_t total = 0;
  absl::StatusOr<bool> found = GetRawInto(key, [&](absl::string_view value) -> absl::Status {
    if (value.size() == kManifestBytes && std::memcmp(value.data(), kChunkMagic, 8) == 0) {
      chunked = true;
      std::memcpy(&count, value.data() + 8, sizeof(count));
      std::memcpy(&total, value.data() + 12, sizeof(total));
      if (count == 0 || count > kMaxChunks ||
          total > static_cast<uint64_t>(config_.max_value_bytes) + kRemoteValueHeaderBytes) {
        return absl::DataLossError("a manifest over the caps");
      }
      return absl::OkStatus();
    }
    return take(value);
  });
  if (!found.ok()) return miss(found.status());
  if (!*found) return miss(absl::NotFoundError("none"));
  for (uint32_t i = 0; chunked && i < count; ++i) {
    absl::StatusOr<bool> piece = GetRawInto(absl::StrCat(key, "#", i), [&](absl::string_view b) {
      if (received + b.size() > total) {
        return absl::DataLossError("chunks past the manifest's size");
      }
      return take(b);
    });
    if (!piece.ok()) return miss(piece.status());
    if (!*piece) return miss(absl::NotFoundError("expired or being written"));
  }
  if (chunked && received != total) {
    return miss(absl::DataLossError("chunks short of the manifest's size"));
  }
  if (head.size() < kRemoteValueHeaderBytes) return miss(absl::DataLossError("truncated header"));
  if (absl::Status checked = CheckRemotePayload(
          key_, kind, name, header,
          absl::string_view(reinterpret_cast<const char*>(out.get()), filled));
      !checked.ok()) {
    return miss(checked);
  }
  stats_.hits++;
  stats_.bytes_read += received;
  return out;
}

void RedisStore::Put(absl::string_view kind, const std::string& name, absl::string_view payload) {
  if (payload.size() > static_cast<uint64_t>(config_.max_value_bytes)) {
    spdlog::debug("remote cache: {}:{} not written ({} bytes, over the cap)", std::string(kind),
                  name, payload.size());
    return;
  }
  absl::StatusOr<std::string> value = SealRemoteValue(key_, kind, name, payload);
  if (!value.ok()) return;
  const std::string key = KeyOf(kind, name);
  absl::MutexLock lock(&mu_);
  absl::Status written;
  const size_t chunk = static_cast<size_t>(config_.chunk_bytes);
  if (value->size() <= chunk) {
    written = SetRaw(key, *value);
  } else {
    const uint32_t count = static_cast<uint32_t>((value->size() + chunk - 1) / chunk);
    for (uint32_t i = 0; i < count && written.ok(); ++i) {
      written = SetRaw(absl::StrCat(key, "#", i),
                       absl::string_view(*value).substr(static_cast<size_t>(i) * chunk, chunk));
    }
    if (written.ok()) {
      std::string manifest(kChunkMagic, 8);
      const uint64_t total = value->size();
      manifest.append(reinterpret_cast<const char*>(&count), sizeof(count));
      manifest.append(reinterpret_cast<const char*>(&total), sizeof(total));
      written = SetRaw(key, manifest);
    }
  }
  if (written.ok()) {
    stats_.bytes_written += value->size();
  } else if (absl::IsResourceExhausted(written)) {
    stats_.errors++;
    spdlog::warn("remote cache {}: {} not written ({})", display_url_, key,
                 std::string(written.message()));
  }
}

bool RedisStore::TryLock(const std::string& name, std::chrono::milliseconds ttl) {
  const std::string key = KeyOf("lock", name);
  absl::MutexLock lock(&mu_);
  redisContext* c = Connection();
  if (c == nullptr) return true;
  Reply reply(static_cast<redisReply*>(redisCommand(c, "SET %b %b NX PX %lld", key.data(),
                                                    key.size(), owner_.data(), owner_.size(),
                                                    static_cast<long long>(ttl.count()))));
  if (!reply) {
    Fail(absl::StrCat("SET NX: ", c->errstr));
    return true;
  }
  return reply->type == REDIS_REPLY_STATUS;  // NIL: another holds it
}

void RedisStore::Renew(const std::string& name, std::chrono::milliseconds ttl) {
  const std::string key = KeyOf("lock", name);
  absl::MutexLock lock(&mu_);
  redisContext* c = Connection();
  if (c == nullptr) return;
  Reply reply(static_cast<redisReply*>(
      redisCommand(c, "EVAL %s 1 %b %b %lld", kRenewScript, key.data(), key.size(),
                   owner_.data(), owner_.size(), static_cast<long long>(ttl.count()))));
  if (!reply) Fail(absl::StrCat("EVAL: ", c->errstr));
}

void RedisStore::Unlock(const std::string& name) {
  const std::string key = KeyOf("lock", name);
  absl::MutexLock lock(&mu_);
  redisContext* c = Connection();
  if (c == nullptr) return;
  Reply reply(static_cast<redisReply*>(redisCommand(c, "EVAL %s 1 %b %b", kUnlockScript,
                                                    key.data(), key.size(), owner_.data(),
                                                    owner_.size())));
  if (!reply) Fail(absl::StrCat("EVAL: ", c->errstr));
}

bool RedisStore::Has(absl::string_view kind, const std::string& name) {
  return Exists(KeyOf(kind, name));
}

bool RedisStore::Locked(const std::string& name) { return Exists(KeyOf("lock", name)); }

bool RedisStore::Exists(const std::string& key) {
  absl::MutexLock lock(&mu_);
  redisContext* c = Connection();
  if (c == nullptr) return false;
  Reply reply(static_cast<redisReply*>(redisCommand(c, "EXISTS %b", key.data(), key.size())));
  if (!reply) {
    Fail(absl::StrCat("EXISTS: ", c->errstr));
    return false;
  }
  return reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
}

}  // namespace kiln::cache
