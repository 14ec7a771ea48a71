#include "cache/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/cache_dir.h"
#include "cache/compiler_version.h"
#include "cache/digest.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '\0'};
// A writer's temporary this old belongs to a writer that died: no write of
// one entry takes an hour.
constexpr time_t kStaleTemporarySeconds = 3600;
// The longest header: magic, format, two strings of at most 4096 bytes
// with their lengths, size, checksum, MAC nonce and tag.
constexpr uint64_t kMaxHeaderBytes = 8 + 4 + 2 * (4 + 4096) + 8 + 64 + 12 + 16;
// A payload is a graph a client sent in one message (kilnd takes messages
// of up to 256 MiB); anything larger was not written by a daemon.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 30;

// What an entry's MAC covers: everything its header vouches for (the
// graph key it is stored under, the compiler version, the CPU features)
// and the payload.
std::optional<MacTag> EntryMac(const CacheKey& key, const MacIv& iv, const std::string& graph_key,
                               const std::string& payload) {
  const uint64_t size = payload.size();
  std::string prefix = absl::StrCat("kiln artifact\n", graph_key, "\n", CompilerVersion(), "\n",
                                    runtime::CpuFeatureString(), "\n");
  prefix.append(reinterpret_cast<const char*>(&size), sizeof(size));
  return Gmac(key, iv, {prefix, payload});
}

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

// Sequential reader over an entry's bytes that fails instead of overrunning.
class Reader {
 public:
  explicit Reader(const std::string& data) : data_(data) {}
  bool Bytes(size_t n, std::string* out) {
    if (data_.size() - pos_ < n) return false;
    out->assign(data_, pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Scalar(T* v) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool String(std::string* out) {
    uint32_t n = 0;
    return Scalar(&n) && n <= 4096 && Bytes(n, out);
  }
  size_t remaining() const { return data_.size() - pos_; }

 private:
  const std::string& data_;
  size_t pos_ = 0;
};

}  // namespace

struct ArtifactStore::ScanResult {
  struct Entry {
    std::string path;
    uint64_t size;
    timespec mtime;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
};

ArtifactStore::ArtifactStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {
  if (dir_.empty()) return;
  absl::StatusOr<FileDescriptor> root = OpenCacheRoot(dir_, /*create=*/true);
  if (!root.ok()) {
    Disable(std::string(root.status().message()));
    return;
  }
  const std::string artifacts = (fs::path(dir_) / "artifacts").string();
  absl::StatusOr<FileDescriptor> sub =
      OpenCacheSubdirectory(root->get(), "artifacts", artifacts, /*create=*/true);
  if (!sub.ok()) {
    Disable(std::string(sub.status().message()));
    return;
  }
  if (::faccessat(root->get(), "artifacts", W_OK, 0) != 0) {
    Disable(absl::StrCat(dir_, " is not writable"));
    return;
  }
  // Before anything in it is read: a directory someone else can write
  // refuses the whole cache now rather than entry by entry.
  if (absl::Status tree = CheckTree(root->get()); !tree.ok()) {
    Disable(std::string(tree.message()));
    return;
  }
  // Without the key nothing read back can be checked, and a key someone
  // else could read or write means the directory is not the daemon's alone.
  absl::StatusOr<CacheKey> key = LoadOrCreateCacheKey(
      root->get(), kCacheKeyFile, (fs::path(dir_) / kCacheKeyFile).string());
  if (!key.ok()) {
    Disable(std::string(key.status().message()));
    return;
  }
  key_ = *key;
  enabled_ = true;
  const uint64_t total = Rescan();
  spdlog::debug("compiled-graph cache {}: {} bytes of entries, cap {}", dir_, total,
                max_bytes_ == 0 ? std::string("none") : std::to_string(max_bytes_));
}

absl::Status ArtifactStore::CheckTree(int root) {
  for (const char* kind : {"artifacts", "constants"}) {
    const std::string kind_path = (fs::path(dir_) / kind).string();
    absl::StatusOr<FileDescriptor> dir =
        OpenCacheSubdirectory(root, kind, kind_path, /*create=*/false);
    if (absl::IsNotFound(dir.status())) continue;
    // Not a directory at all (DATA_LOSS): its writes fail later, as any.
    if (absl::IsPermissionDenied(dir.status())) return dir.status();
    if (!dir.ok()) continue;
    std::error_code ec;
    for (auto shard = fs::directory_iterator(kind_path, ec);
         !ec && shard != fs::directory_iterator(); shard.increment(ec)) {
      const std::string name = shard->path().filename().string();
      if (name.size() != 2) continue;
      absl::StatusOr<FileDescriptor> checked = OpenCacheSubdirectory(
          dir->get(), name, shard->path().string(), /*create=*/false);
      if (absl::IsPermissionDenied(checked.status())) return checked.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FileDescriptor> ArtifactStore::OpenRoot() {
  absl::StatusOr<FileDescriptor> root = OpenCacheRoot(dir_, /*create=*/false);
  if (absl::IsPermissionDenied(root.status())) Disable(std::string(root.status().message()));
  return root;
}

absl::StatusOr<FileDescriptor> ArtifactStore::OpenShard(const char* kind,
                                                        const std::string& shard, bool create) {
  // Each level again on every use: a directory changed since the start
  // (its mode, its owner, a symbolic link in its place) is noticed before
  // anything under it is read.
  const fs::path kind_path = fs::path(dir_) / kind;
  absl::StatusOr<FileDescriptor> dir = OpenCacheRoot(dir_, create);
  if (dir.ok()) dir = OpenCacheSubdirectory(dir->get(), kind, kind_path.string(), create);
  if (dir.ok()) {
    dir = OpenCacheSubdirectory(dir->get(), shard, (kind_path / shard).string(), create);
  }
  if (absl::IsPermissionDenied(dir.status())) Disable(std::string(dir.status().message()));
  return dir;
}

// Walks artifacts/<xx>/ and constants/<xx>/ only: the layouts PathFor and
// ConstantFiles write, nothing else in the directory is ever counted or
// touched. Entries and temporaries may vanish under the walk (other
// daemons evict and rename too), so every error just skips the file.
ArtifactStore::ScanResult ArtifactStore::Scan() {
  ScanResult result;
  ScanKind("artifacts", ".kart", &result);
  ScanKind("constants", ".kcst", &result);
  return result;
}

void ArtifactStore::ScanKind(const char* subdir, const std::string& suffix, ScanResult* out) {
  ScanResult& result = *out;
  const std::string temporary_mark = suffix + ".tmp.";
  const time_t stale_before = std::time(nullptr) - kStaleTemporarySeconds;
  std::error_code ec;
  for (auto shard = fs::directory_iterator(fs::path(dir_) / subdir, ec);
       !ec && shard != fs::directory_iterator(); shard.increment(ec)) {
    if (shard->path().filename().string().size() != 2) continue;
    // Only directories of the store's own making: what is under a symbolic
    // link or another user's directory is neither counted nor removed.
    struct stat shard_st;
    if (::lstat(shard->path().c_str(), &shard_st) != 0 ||
        !CheckCacheDirectory(shard_st, shard->path().string()).ok()) {
      continue;
    }
    std::error_code shard_ec;
    for (auto file = fs::directory_iterator(shard->path(), shard_ec);
         !shard_ec && file != fs::directory_iterator(); file.increment(shard_ec)) {
      const std::string path = file->path().string();
      const std::string name = file->path().filename().string();
      struct stat st;
      if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.find(temporary_mark) != std::string::npos) {
        if (st.st_mtime < stale_before) {
          std::error_code rm_ec;
          fs::remove(path, rm_ec);
        }
      } else if (name.size() > suffix.size() &&
                 name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        result.entries.push_back({path, static_cast<uint64_t>(st.st_size), st.st_mtim});
        result.total += static_cast<uint64_t>(st.st_size);
      }
    }
  }
}

void ArtifactStore::Added(const std::string& path, uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    total_bytes_ += bytes;
  }
  EvictIfOver(path);
}

void ArtifactStore::Forget(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  total_bytes_ -= std::min(total_bytes_, bytes);
}

uint64_t ArtifactStore::Rescan() {
  if (!enabled()) return 0;
  absl::MutexLock lock(&mu_);
  total_bytes_ = Scan().total;
  return total_bytes_;
}

std::vector<ArtifactStore::StoredFile> ArtifactStore::List(const char* kind) {
  std::vector<StoredFile> files;
  if (!enabled()) return files;
  ScanResult scan;
  {
    absl::MutexLock lock(&mu_);
    ScanKind(kind, std::strcmp(kind, "artifacts") == 0 ? ".kart" : ".kcst", &scan);
  }
  files.reserve(scan.entries.size());
  for (auto& e : scan.entries) {
    files.push_back({std::move(e.path), e.size, static_cast<int64_t>(e.mtime.tv_sec)});
  }
  return files;
}

uint64_t ArtifactStore::total_bytes() const {
  absl::MutexLock lock(&mu_);
  return total_bytes_;
}

void ArtifactStore::EvictIfOver(const std::string& keep_path) {
  if (max_bytes_ == 0) return;
  absl::MutexLock lock(&mu_);
  if (total_bytes_ <= max_bytes_) return;
  // Our figure misses other daemons' writes and evictions: count again
  // before deleting anything.
  ScanResult scan = Scan();
  total_bytes_ = scan.total;
  if (total_bytes_ <= max_bytes_) return;
  std::sort(scan.entries.begin(), scan.entries.end(), [](const auto& a, const auto& b) {
    if (a.mtime.tv_sec != b.mtime.tv_sec) return a.mtime.tv_sec < b.mtime.tv_sec;
    if (a.mtime.tv_nsec != b.mtime.tv_nsec) return a.mtime.tv_nsec < b.mtime.tv_nsec;
    return a.path < b.path;
  });
  size_t count = 0;
  uint64_t bytes = 0;
  for (const auto& e : scan.entries) {
    if (total_bytes_ <= max_bytes_) break;
    if (e.path == keep_path) continue;
    std::error_code ec;
    fs::remove(e.path, ec);
    if (ec) continue;  // not ours to remove (permissions): keep counting it
    total_bytes_ -= e.size;
    ++count;
    bytes += e.size;
  }
  if (count == 0) return;  // only the entry just written, alone over the cap
  spdlog::info("compiled-graph cache over its {:.1f} MiB cap: evicted {} least recently used entries ({} bytes)",
               static_cast<double>(max_bytes_) / (1 << 20), count, bytes);
}

void ArtifactStore::Disable(const std::string& why) {
  enabled_ = false;
  if (!warned_.exchange(true)) {
    spdlog::warn("compiled-graph cache disabled: {}; compiling without caching", why);
  }
}

std::string ArtifactStore::PathFor(const std::string& key) const {
  return (fs::path(dir_) / "artifacts" / key.substr(0, 2) / (key + ".kart")).string();
}

std::optional<std::string> ArtifactStore::Load(const std::string& key, bool for_export) {
  if (!enabled()) return std::nullopt;
  const std::string path = PathFor(key);
  absl::StatusOr<FileDescriptor> shard = OpenShard("artifacts", key.substr(0, 2), false);
  if (!shard.ok()) return std::nullopt;
  const std::string name = fs::path(path).filename().string();
  absl::StatusOr<CacheEntry> entry = OpenCacheEntry(shard->get(), name, path);
  uint64_t file_size = 0;
  auto reject = [&](absl::string_view why) -> std::optional<std::string> {
    spdlog::warn("cache entry {} rejected ({}); removing it and recompiling", path,
                 std::string(why));
    if (::unlinkat(shard->get(), name.c_str(), 0) == 0) {
      absl::MutexLock lock(&mu_);
      total_bytes_ -= std::min<uint64_t>(total_bytes_, file_size);
    }
    return std::nullopt;
  };
  if (absl::IsDataLoss(entry.status())) return reject(entry.status().message());
  if (!entry.ok()) return std::nullopt;
  file_size = static_cast<uint64_t>(entry->st.st_size);

  // The header is read first, and the payload only when the header's size
  // is the rest of the file: a planted file of any length (a sparse one of
  // terabytes) costs one header's read.
  std::string head(std::min<uint64_t>(file_size, kMaxHeaderBytes), '\0');
  if (absl::Status read = ReadExactly(entry->fd.get(), 0, head.data(), head.size(), path);
      !read.ok()) {
    return reject(read.message());
  }
  Reader r(head);
  std::string magic, version, features, checksum;
  uint32_t format = 0;
  uint64_t size = 0;
  if (!r.Bytes(8, &magic) || std::memcmp(magic.data(), kMagic, 8) != 0) return reject("bad magic");
  if (!r.Scalar(&format)) return reject("truncated header");
  if (format != kArtifactFormatVersion) return reject("other format version");
  if (!r.String(&version) || !r.String(&features)) return reject("truncated header");
  if (version != CompilerVersion() || features != runtime::CpuFeatureString()) {
    // Another kilnd's on this directory: its business, not an export's.
    if (for_export) return std::nullopt;
    return reject(version != CompilerVersion() ? "other runtime version" : "other CPU features");
  }
  std::string iv, tag;
  if (!r.Scalar(&size) || !r.Bytes(64, &checksum) || !r.Bytes(12, &iv) || !r.Bytes(16, &tag)) {
    return reject("truncated header");
  }
  const uint64_t header_size = head.size() - r.remaining();
  if (file_size - header_size != size) return reject("truncated or oversized payload");
  if (size > kMaxPayloadBytes) return reject("payload larger than any graph");
  std::string payload(size, '\0');
  if (absl::Status read =
          ReadExactly(entry->fd.get(), header_size, payload.data(), payload.size(), path);
      !read.ok()) {
    return reject(read.message());
  }
  if (runtime::Sha256Hex(payload) != checksum) return reject("checksum mismatch");
  // The payload says what to run: only a daemon holding the directory's
  // key may have written it.
  MacIv nonce;
  MacTag stored;
  std::memcpy(nonce.data(), iv.data(), nonce.size());
  std::memcpy(stored.data(), tag.data(), stored.size());
  const std::optional<MacTag> expected = EntryMac(*key_, nonce, key, payload);
  if (!expected || !TagsEqual(*expected, stored)) return reject("no valid MAC");
  // The LRU clock (see the header); failing to set it only ages the entry.
  if (!for_export) ::futimens(entry->fd.get(), nullptr);
  return payload;
}

void ArtifactStore::Store(const std::string& key, const std::string& payload) {
  if (!enabled()) return;
  std::string data(kMagic, 8);
  PutU32(&data, kArtifactFormatVersion);
  PutU32(&data, static_cast<uint32_t>(std::strlen(CompilerVersion())));
  data += CompilerVersion();
  PutU32(&data, static_cast<uint32_t>(runtime::CpuFeatureString().size()));
  data += runtime::CpuFeatureString();
  PutU64(&data, payload.size());
  data += runtime::Sha256Hex(payload);
  const MacIv iv = RandomMacIv();
  const std::optional<MacTag> tag = EntryMac(*key_, iv, key, payload);
  if (!tag) {
    spdlog::warn("cache entry {} not written: no MAC (OpenSSL)", key);
    return;
  }
  data.append(reinterpret_cast<const char*>(iv.data()), iv.size());
  data.append(reinterpret_cast<const char*>(tag->data()), tag->size());
  data += payload;

  const fs::path final_path = PathFor(key);
  const std::string name = final_path.filename().string();
  absl::StatusOr<FileDescriptor> shard = OpenShard("artifacts", key.substr(0, 2), true);
  if (!shard.ok()) return Disable(std::string(shard.status().message()));
  // A unique temporary name per writer, so daemons sharing the directory
  // never write into each other's temporaries.
  std::random_device rd;
  const std::string tmp_name = name + absl::StrCat(".tmp.", getpid(), ".", rd());
  const fs::path tmp = final_path.parent_path() / tmp_name;
  int fd = ::openat(shard->get(), tmp_name.c_str(),
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    return Disable(absl::StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
  }
  if (!WriteAll(fd, data.data(), data.size())) {
    const int err = errno;
    close(fd);
    ::unlinkat(shard->get(), tmp_name.c_str(), 0);
    return Disable(absl::StrCat("write to ", tmp.string(), " failed: ", std::strerror(err)));
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    ::unlinkat(shard->get(), tmp_name.c_str(), 0);
    return Disable(absl::StrCat("cannot flush ", tmp.string()));
  }
  struct stat old_st;
  const uint64_t replaced =
      ::fstatat(shard->get(), name.c_str(), &old_st, AT_SYMLINK_NOFOLLOW) == 0
          ? static_cast<uint64_t>(old_st.st_size)
          : 0;
  if (::renameat(shard->get(), tmp_name.c_str(), shard->get(), name.c_str()) != 0) {
    ::unlinkat(shard->get(), tmp_name.c_str(), 0);
    return Disable(absl::StrCat("cannot rename into ", final_path.string()));
  }
  {
    absl::MutexLock lock(&mu_);
    total_bytes_ = total_bytes_ - std::min(total_bytes_, replaced) + data.size();
  }
  EvictIfOver(final_path.string());
}

}  // namespace kiln::cache
