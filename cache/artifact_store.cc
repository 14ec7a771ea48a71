#include "cache/artifact_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '\0'};

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

ArtifactStore::ArtifactStore(std::string dir) : dir_(std::move(dir)) {
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
    fs::remove(path, ec);
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
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Disable(absl::StrCat("cannot rename into ", final_path.string()));
  }
}

}  // namespace kiln::cache
