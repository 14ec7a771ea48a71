#include "cache/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
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

// Size of the file at `path`, 0 if it does not exist.
uint64_t FileSize(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
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
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "artifacts", ec);
  if (ec) {
    Disable(absl::StrCat("cannot create ", dir_, ": ", ec.message()));
    return;
  }
  if (access((fs::path(dir_) / "artifacts").c_str(), W_OK) != 0) {
    Disable(absl::StrCat(dir_, " is not writable"));
    return;
  }
  enabled_ = true;
  const uint64_t total = Rescan();
  spdlog::debug("compiled-graph cache {}: {} bytes of entries, cap {}", dir_, total,
                max_bytes_ == 0 ? std::string("none") : std::to_string(max_bytes_));
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

std::optional<std::string> ArtifactStore::Load(const std::string& key) {
  if (!enabled()) return std::nullopt;
  const std::string path = PathFor(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();

  auto reject = [&](const char* why) -> std::optional<std::string> {
    spdlog::warn("cache entry {} rejected ({}); removing it and recompiling", path, why);
    std::error_code ec;
    if (fs::remove(path, ec)) {
      absl::MutexLock lock(&mu_);
      total_bytes_ -= std::min<uint64_t>(total_bytes_, data.size());
    }
    return std::nullopt;
  };
  Reader r(data);
  std::string magic, version, features, checksum, payload;
  uint32_t format = 0;
  uint64_t size = 0;
  if (!r.Bytes(8, &magic) || std::memcmp(magic.data(), kMagic, 8) != 0) return reject("bad magic");
  if (!r.Scalar(&format)) return reject("truncated header");
  if (format != kArtifactFormatVersion) return reject("other format version");
  if (!r.String(&version) || !r.String(&features)) return reject("truncated header");
  if (version != KILN_RUNTIME_VERSION) return reject("other runtime version");
  if (features != runtime::CpuFeatureString()) return reject("other CPU features");
  if (!r.Scalar(&size) || !r.Bytes(64, &checksum)) return reject("truncated header");
  if (r.remaining() != size) return reject("truncated or oversized payload");
  r.Bytes(size, &payload);
  if (runtime::Sha256Hex(payload) != checksum) return reject("checksum mismatch");
  // The LRU clock (see the header); failing to set it only ages the entry.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return payload;
}

void ArtifactStore::Store(const std::string& key, const std::string& payload) {
  if (!enabled()) return;
  std::string data(kMagic, 8);
  PutU32(&data, kArtifactFormatVersion);
  PutU32(&data, static_cast<uint32_t>(std::strlen(KILN_RUNTIME_VERSION)));
  data += KILN_RUNTIME_VERSION;
  PutU32(&data, static_cast<uint32_t>(runtime::CpuFeatureString().size()));
  data += runtime::CpuFeatureString();
  PutU64(&data, payload.size());
  data += runtime::Sha256Hex(payload);
  data += payload;

  const fs::path final_path = PathFor(key);
  std::error_code ec;
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) return Disable(absl::StrCat("cannot create ", final_path.parent_path().string(), ": ", ec.message()));
  // A unique temporary name per writer, so daemons sharing the directory
  // never write into each other's temporaries.
  std::random_device rd;
  const fs::path tmp = final_path.string() + absl::StrCat(".tmp.", getpid(), ".", rd());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Disable(absl::StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
  size_t written = 0;
  while (written < data.size()) {
    ssize_t n = write(fd, data.data() + written, data.size() - written);
    if (n <= 0) {
      int err = errno;
      close(fd);
      fs::remove(tmp, ec);
      return Disable(absl::StrCat("write to ", tmp.string(), " failed: ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    fs::remove(tmp, ec);
    return Disable(absl::StrCat("cannot flush ", tmp.string()));
  }
  const uint64_t replaced = FileSize(final_path.string());
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Disable(absl::StrCat("cannot rename into ", final_path.string()));
  }
  {
    absl::MutexLock lock(&mu_);
    total_bytes_ = total_bytes_ - std::min(total_bytes_, replaced) + data.size();
  }
  EvictIfOver(final_path.string());
}

}  // namespace kiln::cache
