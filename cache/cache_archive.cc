#include "cache/cache_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cache/cache_dir.h"
#include "cache/compiler_version.h"
#include "cache/remote_value.h"
#include "kiln/v1/artifact.pb.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'P', 'A', 'K', '\0'};
constexpr uint8_t kEnd = 0;
enum Kind : uint8_t { kArtifact = 1, kDerived = 2, kUploaded = 3, kLowering = 4 };
constexpr const char* kKindNames[] = {"", "artifact", "derived", "uploaded", "lowering"};
// Names are graph keys, lowering keys, "h:" hashes or derived keys, which
// the constant files store up to 4032 bytes of.
constexpr uint32_t kMaxName = 4096;
constexpr uint32_t kMaxHeaderString = 4096;
// The client's lowering entries (client/kiln/lowering_cache.py).
constexpr char kLoweringDir[] = "lowered";
constexpr char kLoweringSuffix[] = ".klow";
// The client stores payloads of up to 64 MiB, plus its header.
constexpr uint64_t kMaxLoweringFile = (uint64_t{64} << 20) + (uint64_t{64} << 10);

bool IsHexKey(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

void PutString(std::string* out, absl::string_view s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

// The archive being written: records go straight to its temporary.
class Writer {
 public:
  static absl::StatusOr<Writer> Open(const std::string& path) {
    std::random_device rd;
    Writer w;
    w.path_ = path;
    w.tmp_ = absl::StrCat(path, ".tmp.", ::getpid(), ".", rd());
    w.fd_ = FileDescriptor(
        ::open(w.tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (w.fd_.get() < 0) {
      return absl::InternalError(absl::StrCat("cannot write ", w.tmp_, ": ", std::strerror(errno)));
    }
    std::string head(kMagic, sizeof(kMagic));
    Put<uint32_t>(&head, kCacheArchiveFormat);
    PutString(&head, CompilerVersion());
    PutString(&head, runtime::CpuFeatureString());
    if (absl::Status s = w.Write(head); !s.ok()) return s;
    return w;
  }
  Writer() = default;
  Writer(Writer&& other) noexcept
      : path_(std::move(other.path_)),
        tmp_(std::exchange(other.tmp_, std::string())),
        fd_(std::move(other.fd_)),
        records_(other.records_) {}
  Writer& operator=(Writer&&) = delete;
  ~Writer() {
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }

  absl::Status Record(const CacheKey& key, Kind kind, const std::string& name,
                      absl::string_view payload) {
    absl::StatusOr<std::string> sealed = SealRemoteValue(key, kKindNames[kind], name, payload);
    if (!sealed.ok()) return sealed.status();
    std::string head;
    Put<uint8_t>(&head, kind);
    PutString(&head, name);
    Put<uint64_t>(&head, sealed->size());
    if (absl::Status s = Write(head); !s.ok()) return s;
    ++records_;
    return Write(*sealed);
  }

  // The end record, then the rename that makes the archive appear whole.
  absl::Status Finish() {
    std::string end;
    Put<uint8_t>(&end, kEnd);
    Put<uint32_t>(&end, 0);
    Put<uint64_t>(&end, records_);
    if (absl::Status s = Write(end); !s.ok()) return s;
    if (::fsync(fd_.get()) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
    }
    tmp_.clear();
    return absl::OkStatus();
  }

 private:
  absl::Status Write(absl::string_view bytes) {
    if (!WriteAll(fd_.get(), bytes.data(), bytes.size())) {
      return absl::InternalError(absl::StrCat("write to ", tmp_, " failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  std::string path_, tmp_;
  FileDescriptor fd_;
  uint64_t records_ = 0;
};

// The archive being read: every length checked against what is left of
// the file before anything is allocated for it.
class Reader {
 public:
  explicit Reader(FileDescriptor fd, uint64_t size, std::string path)
      : fd_(std::move(fd)), size_(size), path_(std::move(path)) {}

  uint64_t left() const { return size_ - pos_; }

  bool Bytes(uint64_t n, std::string* out) {
    if (n > left()) return false;
    out->resize(static_cast<size_t>(n));
    if (!ReadExactly(fd_.get(), pos_, out->data(), out->size(), path_).ok()) return false;
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Scalar(T* v) {
    std::string b;
    if (!Bytes(sizeof(T), &b)) return false;
    std::memcpy(v, b.data(), sizeof(T));
    return true;
  }
  bool String(uint32_t max, std::string* out) {
    uint32_t n = 0;
    return Scalar(&n) && n <= max && Bytes(n, out);
  }

 private:
  FileDescriptor fd_;
  const uint64_t size_;
  uint64_t pos_ = 0;
  const std::string path_;
};

runtime::ConstantData DataOf(std::string bytes) {
  auto owner = std::make_shared<std::string>(std::move(bytes));
  const auto* data = reinterpret_cast<const uint8_t*>(owner->data());
  const auto size = static_cast<int64_t>(owner->size());
  return runtime::ConstantData{std::shared_ptr<const uint8_t>(std::move(owner), data), size};
}

// The constant keys an entry's compile uses: its client weights and the
// optimized graph's constants (a packed weight's key names the one it was
// packed from: "pack|<key>|...").
absl::flat_hash_set<std::string> ConstantsOf(const kiln::v1::Artifact& artifact) {
  absl::flat_hash_set<std::string> keys;
  for (const auto& node : artifact.graph().nodes()) {
    if (node.has_constant()) keys.insert(runtime::StoreConstantKey(node.constant().hash()));
  }
  for (const auto& node : artifact.optimized().nodes()) {
    if (node.has_constant() && !node.constant().share_key().empty()) {
      keys.insert(node.constant().share_key());
    }
  }
  return keys;
}

bool Uses(const absl::flat_hash_set<std::string>& keys, const std::string& key) {
  if (keys.contains(key)) return true;
  absl::string_view rest(key);
  if (!absl::ConsumePrefix(&rest, "pack|")) return false;
  return keys.contains(rest.substr(0, rest.find('|')));
}

// The client's lowering entries: <dir>/lowered/<64 hex>.klow, regular
// files of ours, read whole.
absl::Status ExportLowerings(const std::string& dir, const CacheKey& key, int64_t oldest,
                             Writer* out, ArchiveCounts* counts) {
  absl::StatusOr<FileDescriptor> root = OpenCacheRoot(dir, /*create=*/false);
  if (!root.ok()) return absl::OkStatus();
  const std::string lowered = (fs::path(dir) / kLoweringDir).string();
  absl::StatusOr<FileDescriptor> sub =
      OpenCacheSubdirectory(root->get(), kLoweringDir, lowered, /*create=*/false);
  if (!sub.ok()) return absl::OkStatus();  // none, or not ours: nothing of it goes out
  std::error_code ec;
  for (auto it = fs::directory_iterator(lowered, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!absl::EndsWith(name, kLoweringSuffix)) continue;
    const std::string lowering_key = name.substr(0, name.size() - std::strlen(kLoweringSuffix));
    if (!IsHexKey(lowering_key)) continue;
    absl::StatusOr<CacheEntry> entry = OpenCacheEntry(sub->get(), name, it->path().string());
    if (!entry.ok()) continue;
    if (entry->st.st_mtime < oldest) continue;
    const auto size = static_cast<uint64_t>(entry->st.st_size);
    if (size > kMaxLoweringFile) continue;
    std::string bytes(size, '\0');
    if (!ReadExactly(entry->fd.get(), 0, bytes.data(), bytes.size(), it->path().string()).ok()) {
      continue;
    }
    if (absl::Status s = out->Record(key, kLowering, lowering_key, bytes); !s.ok()) return s;
    counts->lowerings++;
    counts->bytes += size;
  }
  return absl::OkStatus();
}

// Writes a lowering entry's file as the client does: a temporary of its
// own, renamed into place.
absl::Status ImportLowering(const std::string& dir, const std::string& lowering_key,
                            const std::string& bytes) {
  absl::StatusOr<FileDescriptor> root = OpenCacheRoot(dir, /*create=*/true);
  if (!root.ok()) return root.status();
  absl::StatusOr<FileDescriptor> sub = OpenCacheSubdirectory(
      root->get(), kLoweringDir, (fs::path(dir) / kLoweringDir).string(), /*create=*/true);
  if (!sub.ok()) return sub.status();
  const std::string name = lowering_key + kLoweringSuffix;
  std::random_device rd;
  const std::string tmp = absl::StrCat(name, ".tmp.", ::getpid(), ".", rd());
  FileDescriptor fd(::openat(sub->get(), tmp.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.get() < 0) {
    return absl::InternalError(absl::StrCat("cannot write in ", dir, "/", kLoweringDir, ": ",
                                            std::strerror(errno)));
  }
  if (!WriteAll(fd.get(), bytes.data(), bytes.size()) ||
      ::renameat(sub->get(), tmp.c_str(), sub->get(), name.c_str()) != 0) {
    const int err = errno;
    ::unlinkat(sub->get(), tmp.c_str(), 0);
    return absl::InternalError(absl::StrCat("cannot write ", dir, "/", kLoweringDir, "/", name,
                                            ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ArchiveCounts> ExportCache(ArtifactStore* store, ConstantFiles* files,
                                          const CacheKey& archive_key,
                                          const ArchiveSelection& selection,
                                          const std::string& path) {
  if (!store->enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read ", store->dir(), " as a cache directory (see the log)"));
  }
  const int64_t oldest = selection.used_within_s > 0
                             ? static_cast<int64_t>(std::time(nullptr)) - selection.used_within_s
                             : 0;
  auto chosen = [&](const std::string& graph_key) {
    if (selection.key_prefixes.empty()) return true;
    for (const std::string& prefix : selection.key_prefixes) {
      if (absl::StartsWith(graph_key, prefix)) return true;
    }
    return false;
  };
  absl::StatusOr<Writer> out = Writer::Open(path);
  if (!out.ok()) return out.status();
  ArchiveCounts counts;
  const bool everything = selection.key_prefixes.empty() && selection.used_within_s == 0;
  absl::flat_hash_set<std::string> used;  // constant keys of the chosen entries
  for (const ArtifactStore::StoredFile& f : store->List("artifacts")) {
    const std::string file = fs::path(f.path).filename().string();
    const std::string graph_key = file.substr(0, file.size() - std::strlen(".kart"));
    if (!IsHexKey(graph_key) || f.mtime_s < oldest || !chosen(graph_key)) continue;
    std::optional<std::string> payload = store->Load(graph_key, /*for_export=*/true);
    if (!payload) {
      // Another compiler's entry is skipped quietly; a bad one was logged.
      continue;
    }
    kiln::v1::Artifact artifact;
    if (!artifact.ParseFromString(*payload)) {
      counts.refused++;
      spdlog::warn("cache entry {} does not parse; not exported", graph_key);
      continue;
    }
    if (!everything) used.merge(ConstantsOf(artifact));
    if (absl::Status s = out->Record(archive_key, kArtifact, graph_key, *payload); !s.ok()) {
      return s;
    }
    counts.artifacts++;
    counts.bytes += payload->size();
  }
  for (const ConstantFiles::Saved& saved : files->List()) {
    if (!everything && !Uses(used, saved.key)) continue;
    std::optional<runtime::ConstantData> data = files->ReadSaved(saved);
    if (!data) {
      counts.refused++;  // gone since listed, or bad (logged, deleted)
      continue;
    }
    const absl::string_view bytes(reinterpret_cast<const char*>(data->bytes.get()),
                                  static_cast<size_t>(data->size));
    if (absl::Status s =
            out->Record(archive_key, saved.derived ? kDerived : kUploaded, saved.key, bytes);
        !s.ok()) {
      return s;
    }
    (saved.derived ? counts.derived : counts.uploaded)++;
    counts.bytes += bytes.size();
  }
  if (selection.key_prefixes.empty()) {
    if (absl::Status s = ExportLowerings(store->dir(), archive_key, oldest, &*out, &counts);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = out->Finish(); !s.ok()) return s;
  return counts;
}

absl::StatusOr<ArchiveCounts> ImportCache(ArtifactStore* store, ConstantFiles* files,
                                          const CacheKey& archive_key, const std::string& path) {
  if (!store->enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot use ", store->dir(), " as a cache directory (see the log)"));
  }
  // The archive is the operator's argument: links followed, but a FIFO is
  // refused rather than waited on.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  Reader in(std::move(fd), static_cast<uint64_t>(st.st_size), path);
  std::string magic, version, features;
  uint32_t format = 0;
  if (!in.Bytes(sizeof(kMagic), &magic) || std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a Kiln cache archive"));
  }
  if (!in.Scalar(&format) || format != kCacheArchiveFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a cache archive of format ", format,
                                                   "; this kilnd reads format ",
                                                   kCacheArchiveFormat));
  }
  if (!in.String(kMaxHeaderString, &version) || !in.String(kMaxHeaderString, &features)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated header"));
  }
  if (version != CompilerVersion() || features != runtime::CpuFeatureString()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " was made by kilnd ", version, " for CPU features '", features,
        "'; this is kilnd ", CompilerVersion(), " on '", runtime::CpuFeatureString(),
        "': none of its entries would ever be used here (export it again with this kilnd on "
        "a host of this kind)"));
  }
  ArchiveCounts counts;
  uint64_t records = 0;
  for (;;) {
    uint8_t kind = 0;
    std::string name;
    uint64_t length = 0;
    if (!in.Scalar(&kind) || !in.String(kMaxName, &name) || !in.Scalar(&length)) break;
    if (kind == kEnd) {
      files->Flush();
      if (!store->enabled()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the cache directory ", store->dir(), " became unusable during the import (see the log)"));
      }
      if (length != records) {
        return absl::DataLossError(absl::StrCat(path, " says it holds ", length,
                                                " records, but ", records, " came before its end"));
      }
      return counts;
    }
    std::string value;
    if (!in.Bytes(length, &value)) break;
    ++records;
    auto refuse = [&](absl::string_view why) {
      counts.refused++;
      spdlog::warn("{}: record {} refused ({})", path, records, std::string(why));
    };
    if (kind > kLowering) {
      refuse(absl::StrCat("unknown kind ", kind));
      continue;
    }
    absl::StatusOr<std::string> payload =
        OpenRemoteValue(archive_key, kKindNames[kind], name, value);
    value.clear();
    if (!payload.ok()) {
      refuse(payload.status().message());
      continue;
    }
    switch (kind) {
      case kArtifact: {
        kiln::v1::Artifact artifact;
        if (!IsHexKey(name)) {
          refuse("not a graph key");
        } else if (!artifact.ParseFromString(*payload)) {
          refuse("not a compiled-graph entry");
        } else {
          store->Store(name, *payload);
          counts.artifacts++;
          counts.bytes += payload->size();
        }
        break;
      }
      case kDerived:
      case kUploaded: {
        const bool derived = kind == kDerived;
        if (derived == absl::StartsWith(name, "h:")) {
          refuse("name of the other kind of constant");
          break;
        }
        if (!derived && (!IsHexKey(name.substr(2)) ||
                         runtime::Sha256Hex(*payload) != absl::string_view(name).substr(2))) {
          refuse("bytes do not match their hash");
          break;
        }
        const uint64_t size = payload->size();
        files->Import(ConstantFiles::Saved{name, derived, size, 0}, DataOf(*std::move(payload)));
        // One constant in memory at a time.
        files->Flush();
        (derived ? counts.derived : counts.uploaded)++;
        counts.bytes += size;
        break;
      }
      case kLowering: {
        if (!IsHexKey(name)) {
          refuse("not a lowering key");
        } else if (absl::Status s = ImportLowering(store->dir(), name, *payload); !s.ok()) {
          return absl::FailedPreconditionError(s.message());
        } else {
          counts.lowerings++;
          counts.bytes += payload->size();
        }
        break;
      }
    }
  }
  files->Flush();
  return absl::DataLossError(absl::StrCat(path, " ends after ", records,
                                          " records, before its end record (truncated): "
                                          "those that opened are imported"));
}

}  // namespace kiln::cache
