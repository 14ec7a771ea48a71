#include "cache/constant_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "cache/checksum.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'S', 'T', '\0'};
constexpr size_t kKeyOffset = 32;
constexpr size_t kMaxStoredKey = kConstantFileHeaderBytes - kKeyOffset;

struct Header {
  char magic[8];
  uint32_t format;
  uint32_t key_length;  // of the whole key; at most kMaxStoredKey stored
  uint64_t payload_size;
  uint64_t checksum;
};
static_assert(sizeof(Header) == kKeyOffset);

bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

// One mapped file whose checksum has not been checked yet.
struct PendingCheck {
  absl::Mutex mu;
  enum class State { kPending, kGood, kBad } state ABSL_GUARDED_BY(mu) = State::kPending;
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t file_size = 0;
  std::string path;
};

struct ConstantFiles::Checks {
  mutable absl::Mutex mu;
  absl::flat_hash_map<const void*, std::shared_ptr<PendingCheck>> by_data ABSL_GUARDED_BY(mu);

  std::shared_ptr<PendingCheck> Find(const void* data) const {
    absl::MutexLock lock(&mu);
    auto it = by_data.find(data);
    return it == by_data.end() ? nullptr : it->second;
  }
};

ConstantFiles::ConstantFiles(ArtifactStore* store)
    : store_(store), checks_(std::make_shared<Checks>()) {
  writer_ = std::thread([this] {
    // Behind compiles and runs: a warm start later matters less than the
    // compile going on now.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
    WriterLoop();
  });
}

ConstantFiles::~ConstantFiles() {
  if (deferring_.load()) runtime::SetDeferredChecks(nullptr);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

bool ConstantFiles::Usable() const { return store_->enabled(); }

void ConstantFiles::InstallDeferredChecks() {
  runtime::SetDeferredChecks(this);
  deferring_ = true;
}

bool ConstantFiles::CheckBeforeRead(const void* data) {
  std::shared_ptr<PendingCheck> check = checks_->Find(data);
  if (check == nullptr) return true;
  bool good;
  {
    // Concurrent readers wait here for the one checking.
    absl::MutexLock lock(&check->mu);
    if (check->state == PendingCheck::State::kPending) {
      checked_bytes_ += check->size;
      const bool ok = ChunkedChecksum64(check->data, check->size) == check->checksum;
      check->state = ok ? PendingCheck::State::kGood : PendingCheck::State::kBad;
      if (!ok) {
        spdlog::warn("cached constant {} rejected (checksum mismatch); removing it",
                     check->path);
        std::error_code ec;
        if (fs::remove(check->path, ec)) store_->Forget(check->file_size);
      }
    }
    good = check->state == PendingCheck::State::kGood;
  }
  if (good) {  // nothing to check any more
    absl::MutexLock lock(&checks_->mu);
    checks_->by_data.erase(data);
  }
  return good;
}

bool ConstantFiles::IsBad(const void* data) const {
  std::shared_ptr<PendingCheck> check = checks_->Find(data);
  if (check == nullptr) return false;
  absl::MutexLock lock(&check->mu);
  return check->state == PendingCheck::State::kBad;
}

std::string ConstantFiles::PathFor(const std::string& key, bool derived) const {
  // A client's bytes are the same for every runtime; what the compiler
  // derives may differ between runtime versions and instruction sets.
  const std::string name =
      derived ? runtime::Sha256Hex(absl::StrCat(key, "\n", KILN_RUNTIME_VERSION, "\n",
                                                runtime::CpuFeatureString()))
              : runtime::Sha256Hex(key);
  return (fs::path(store_->dir()) / "constants" / name.substr(0, 2) / (name + ".kcst")).string();
}

std::optional<runtime::ConstantData> ConstantFiles::LoadFile(const std::string& key, bool derived,
                                                             int64_t size, bool defer_check) {
  defer_check = defer_check && deferring_.load();
  if (!Usable()) return std::nullopt;
  const std::string path = PathFor(key, derived);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  auto reject = [&](const char* why) -> std::optional<runtime::ConstantData> {
    spdlog::warn("cached constant {} rejected ({}); removing it", path, why);
    std::error_code ec;
    if (fs::remove(path, ec)) store_->Forget(static_cast<uint64_t>(st.st_size));
    return std::nullopt;
  };
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kConstantFileHeaderBytes) {
    ::close(fd);
    return reject("truncated header");
  }
  // Kernels may read a little past a weight's last byte (vector loads; the
  // compiler's own buffers have slack for it): the file is mapped at the
  // start of a reservation one zero page longer. Its pages are faulted in
  // by the checksum, in parallel.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t map_size = (file_size + page - 1) / page * page + page;
  void* base = ::mmap(nullptr, map_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return std::nullopt;
  }
  auto unmap = [base, map_size] { ::munmap(base, map_size); };
  void* mapped = ::mmap(base, file_size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  ::close(fd);  // the mapping keeps the file
  if (mapped == MAP_FAILED) {
    unmap();
    return std::nullopt;
  }
  Header h;
  std::memcpy(&h, base, sizeof(h));
  const auto* payload = static_cast<const uint8_t*>(base) + kConstantFileHeaderBytes;
  const char* why = nullptr;
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    why = "bad magic";
  } else if (h.format != kConstantFileFormatVersion) {
    why = "other format version";
  } else if (h.payload_size != file_size - kConstantFileHeaderBytes) {
    why = "truncated or oversized payload";
  } else if (size >= 0 && h.payload_size != static_cast<uint64_t>(size)) {
    why = "other size than asked for";
  } else if (h.key_length != key.size() ||
             std::memcmp(static_cast<const char*>(base) + kKeyOffset, key.data(),
                         std::min(key.size(), kMaxStoredKey)) != 0) {
    why = "other key";
  } else if (!defer_check && (checked_bytes_ += h.payload_size,
                              ChunkedChecksum64(payload, h.payload_size) != h.checksum)) {
    why = "checksum mismatch";
  }
  if (why != nullptr) {
    unmap();
    return reject(why);
  }
  // The LRU clock (artifact_store.h); failing to set it only ages the file.
  // Not when it is recent: a model's files are loaded a hundred at a time,
  // and an hour is fine resolution for eviction.
  if (st.st_mtime < ::time(nullptr) - 3600) ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  {
    absl::MutexLock lock(&mu_);
    known_.insert(path);
  }
  loaded_bytes_ += h.payload_size;
  if (!defer_check) {
    return runtime::ConstantData{
        std::shared_ptr<const uint8_t>(payload, [unmap](const uint8_t*) { unmap(); }),
        static_cast<int64_t>(h.payload_size)};
  }
  auto check = std::make_shared<PendingCheck>();
  check->data = payload;
  check->size = h.payload_size;
  check->checksum = h.checksum;
  check->file_size = file_size;
  check->path = path;
  {
    absl::MutexLock lock(&checks_->mu);
    checks_->by_data[payload] = std::move(check);
  }
  return runtime::ConstantData{
      std::shared_ptr<const uint8_t>(payload,
                                     [unmap, checks = checks_](const uint8_t* p) {
                                       {
                                         absl::MutexLock lock(&checks->mu);
                                         checks->by_data.erase(p);
                                       }
                                       unmap();
                                     }),
      static_cast<int64_t>(h.payload_size)};
}

std::optional<runtime::ConstantData> ConstantFiles::Load(const std::string& key, int64_t size,
                                                         bool defer_check) {
  return LoadFile(key, /*derived=*/true, size, defer_check);
}

void ConstantFiles::Save(const std::string& key, runtime::ConstantData data) {
  Enqueue(key, /*derived=*/true, std::move(data));
}

std::optional<runtime::ConstantData> ConstantFiles::LoadUploaded(const std::string& hash) {
  return LoadFile(runtime::StoreConstantKey(hash), /*derived=*/false, -1, /*defer_check=*/true);
}

void ConstantFiles::SaveUploaded(const std::string& hash, runtime::ConstantData data) {
  Enqueue(runtime::StoreConstantKey(hash), /*derived=*/false, std::move(data));
}

bool ConstantFiles::HasUploaded(const std::string& hash) const {
  if (!Usable()) return false;
  struct stat st;
  return ::stat(PathFor(runtime::StoreConstantKey(hash), false).c_str(), &st) == 0 &&
         S_ISREG(st.st_mode);
}

void ConstantFiles::Enqueue(const std::string& key, bool derived, runtime::ConstantData data) {
  if (!Usable() || data.bytes == nullptr) return;
  std::string path = PathFor(key, derived);
  absl::MutexLock lock(&mu_);
  if (failed_ || stopping_ || !known_.insert(path).second) return;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return;  // saved before (maybe by another daemon)
  queue_.push_back(Pending{key, std::move(path), std::move(data)});
}

void ConstantFiles::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ConstantFiles* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->queue_.empty() && !self->writing_;
      },
      this));
}

void ConstantFiles::WriterLoop() {
  for (;;) {
    Pending job;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      mu_.Await(absl::Condition(
          +[](ConstantFiles* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return !self->queue_.empty() || self->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, and everything written
      job = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    Write(job.key, job.path, job.data);
  }
}

void ConstantFiles::Write(const std::string& key, const std::string& path,
                          const runtime::ConstantData& data) {
  auto fail = [&](const std::string& why) {
    absl::MutexLock lock(&mu_);
    if (!failed_) {
      spdlog::warn("cannot save constants in the cache directory ({}); compiling without "
                   "them from now on",
                   why);
    }
    failed_ = true;
    queue_.clear();
  };
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return fail(absl::StrCat("cannot create ", fs::path(path).parent_path().string()));
  std::string header(kConstantFileHeaderBytes, '\0');
  Header h;
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format = kConstantFileFormatVersion;
  h.key_length = static_cast<uint32_t>(key.size());
  h.payload_size = static_cast<uint64_t>(data.size);
  // On this (low-priority) thread only: no pool threads taken from compiles.
  h.checksum = ChunkedChecksum64(data.bytes.get(), static_cast<size_t>(data.size),
                                 /*parallel=*/false);
  std::memcpy(header.data(), &h, sizeof(h));
  std::memcpy(header.data() + kKeyOffset, key.data(), std::min(key.size(), kMaxStoredKey));
  // A unique temporary per writer: daemons sharing the directory never
  // write into each other's.
  std::random_device rd;
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", rd());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  // No fsync: a torn file after a power cut fails its checksum, and a
  // rename makes the whole file visible at once to other daemons.
  const bool ok = WriteAll(fd, header.data(), header.size()) &&
                  WriteAll(fd, data.bytes.get(), static_cast<size_t>(data.size));
  const int err = errno;
  ::close(fd);
  if (!ok) {
    fs::remove(tmp, ec);
    return fail(absl::StrCat("write to ", tmp, " failed: ", std::strerror(err)));
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return fail(absl::StrCat("cannot rename into ", path));
  }
  store_->Added(path, kConstantFileHeaderBytes + static_cast<uint64_t>(data.size));
}

}  // namespace kiln::cache
