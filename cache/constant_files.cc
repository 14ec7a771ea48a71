#include "cache/constant_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cache/cache_dir.h"
#include "cache/compiler_version.h"
#include "cache/digest.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/exec/parallel.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/large_alloc.h"
#include "runtime/util/sha256.h"
#include "spdlog/spdlog.h"

namespace kiln::cache {
namespace {

// MADV_POPULATE_WRITE (Linux 5.14), which older headers lack.
#ifdef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kPopulateWrite = 23;
#endif

namespace fs = std::filesystem;
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'C', 'S', 'T', '\0'};
constexpr size_t kKeyOffset = 32;
// The MAC field: the GMAC's nonce, its tag, four zero bytes.
constexpr size_t kMacOffset = kConstantFileHeaderBytes - 32;
constexpr size_t kMaxStoredKey = kMacOffset - kKeyOffset;
// Reads in pieces this large, on every core.
constexpr size_t kReadChunk = size_t{1} << 20;
// A deferred load of a constant up to this size reads its bytes in at
// once (biases, batch-norm statistics: kernels copy them while they are
// prepared); larger ones when they are first needed.
constexpr uint64_t kReadAtLoadBytes = uint64_t{64} << 10;

struct Header {
  char magic[8];
  uint32_t format;
  uint32_t key_length;  // of the whole key; at most kMaxStoredKey stored
  uint64_t payload_size;
  uint64_t reserved;  // zero (format 1: a checksum)
};
static_assert(sizeof(Header) == kKeyOffset);

// Memory for a payload of `size` bytes, page-aligned as the kernels' own
// buffers are (at least) 64-aligned, with one zero page past the end:
// kernels may read a little past a weight's last byte (vector loads).
// Untouched pages cost nothing until the payload is read into them.
// `populate`: the bytes are read in now by one thread, and the kernel
// allocating every page at once costs less than a fault per page while
// reading. A payload read in chunks on every core is better off with the
// faults: they are then zero-filled in parallel, where populating would
// do it all on this thread first.
//
// A payload of 2 MiB or more is a run's weight: it takes huge pages as
// freshly packed ones do (runtime/util/large_alloc.h), and is populated
// after the advice, so that the pages it gets are the huge ones.
std::shared_ptr<uint8_t> AllocatePayload(uint64_t size, bool populate) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t map_size = (size + page - 1) / page * page + page;
  if (map_size >= runtime::kHugePageBytes) {
    std::shared_ptr<uint8_t> payload = runtime::SharedLarge(map_size);
    // Advice: an older kernel without MADV_POPULATE_WRITE faults the
    // pages in as they are read instead.
    if (payload != nullptr && populate) ::madvise(payload.get(), map_size, kPopulateWrite);
    return payload;
  }
  void* base = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
  if (base == MAP_FAILED) return nullptr;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(base),
                                  [map_size](uint8_t* p) { ::munmap(p, map_size); });
}

// What a derived constant's MAC covers before its bytes: everything its
// name stands for (key, runtime version, CPU features) and its size.
std::string MacPrefix(const std::string& preimage, uint64_t size) {
  std::string m = absl::StrCat("kiln derived constant\n", preimage, "\n");
  m.append(reinterpret_cast<const char*>(&size), sizeof(size));
  return m;
}

std::optional<MacTag> MacOf(const CacheKey& key, const MacIv& iv, const std::string& preimage,
                            const uint8_t* data, uint64_t size) {
  return Gmac(key, iv,
              {MacPrefix(preimage, size),
               std::string_view(reinterpret_cast<const char*>(data), static_cast<size_t>(size))});
}

// Whether a derived constant goes through the fleet's tier. Not packed
// weights ("pack|<key>|<layouts>", runtime/kernels/onednn_util.cc): a
// daemon packs one from its fold or its client's weight faster than it
// fetches the packed copy from Redis (bench/cache/RESULTS-fleet-*.md), and
// they are half of what a compile derives.
bool SharedInFleet(const std::string& key) { return !absl::StartsWith(key, "pack|"); }

}  // namespace

struct ConstantFiles::Name {
  std::string key;
  bool derived = false;
  std::string preimage;  // what the file name is the SHA-256 of
  std::string shard;     // <dir>/constants/<shard>/
  std::string file;      // <name>.kcst
  std::string path;
};

struct ConstantFiles::Opened {
  CacheEntry entry;
  FileDescriptor shard;
  Header header;
  MacIv iv;
  MacTag tag;
};

// One load whose check is deferred: its bytes (read in at the load, or at
// the check), and what they must match.
struct PendingCheck {
  absl::Mutex mu;
  enum class State { kPending, kGood, kBad } state ABSL_GUARDED_BY(mu) = State::kPending;
  bool read_in ABSL_GUARDED_BY(mu) = false;
  uint8_t* data = nullptr;
  // What owns `data`, alive while the constant handed out is: a copy read
  // in from the fleet's tier is saved here from `data` itself.
  std::weak_ptr<uint8_t> keeper;
  uint64_t size = 0;
  std::string key;
  bool derived = false;
  bool remote = false;  // not in the directory: read in from the fleet's tier
  MacIv iv;        // from the header read with the bytes
  MacTag tag;
  struct stat st;  // of the file read: a rejection deletes that one only
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

ConstantFiles::ConstantFiles(ArtifactStore* store, RedisStore* remote)
    : store_(store), remote_(remote), checks_(std::make_shared<Checks>()) {
  // The store loaded (or created) the directory's key before enabling
  // itself; without it nothing derived can be saved or checked.
  if (store_->enabled()) key_ = store_->key();
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

bool ConstantFiles::Usable() const { return store_->enabled() && key_.has_value(); }

void ConstantFiles::InstallDeferredChecks() {
  runtime::SetDeferredChecks(this);
  deferring_ = true;
}

ConstantFiles::Name ConstantFiles::NameFor(const std::string& key, bool derived) const {
  Name n;
  n.key = key;
  n.derived = derived;
  // A client's bytes are the same for every runtime; what the compiler
  // derives may differ between runtime versions and instruction sets.
  n.preimage = derived ? absl::StrCat(key, "\n", CompilerVersion(), "\n",
                                      runtime::CpuFeatureString())
                       : key;
  const std::string name = runtime::Sha256Hex(n.preimage);
  n.shard = name.substr(0, 2);
  n.file = name + ".kcst";
  n.path = (fs::path(store_->dir()) / "constants" / n.shard / n.file).string();
  return n;
}

std::string ConstantFiles::PathFor(const std::string& key, bool derived) const {
  return NameFor(key, derived).path;
}

void ConstantFiles::Reject(const Name& name, int shard, const struct stat& st,
                           absl::string_view why) {
  spdlog::warn("cached constant {} rejected ({}); removing it", name.path, std::string(why));
  // Only the file that was looked at: another daemon may have put a good
  // one in its place since.
  struct stat now;
  const bool same = ::fstatat(shard, name.file.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
                    now.st_dev == st.st_dev && now.st_ino == st.st_ino;
  const bool removed = same && ::unlinkat(shard, name.file.c_str(), 0) == 0;
  if (removed) store_->Forget(static_cast<uint64_t>(st.st_size));
  absl::MutexLock lock(&mu_);
  known_.erase(name.path);
  if (same && !removed) unremovable_[name.path] = FileId::Of(st);
}

bool ConstantFiles::RejectedBefore(const Name& name, const struct stat& st) {
  absl::MutexLock lock(&mu_);
  auto it = unremovable_.find(name.path);
  return it != unremovable_.end() && it->second == FileId::Of(st);
}

absl::StatusOr<ConstantFiles::Opened> ConstantFiles::OpenChecked(const Name& name, int64_t size) {
  if (!Usable()) return absl::NotFoundError("no cache directory");
  Opened f;
  absl::StatusOr<FileDescriptor> shard = store_->OpenShard("constants", name.shard, false);
  if (!shard.ok()) return absl::NotFoundError(shard.status().message());
  f.shard = *std::move(shard);
  absl::StatusOr<CacheEntry> entry = OpenCacheEntry(f.shard.get(), name.file, name.path);
  if (absl::IsDataLoss(entry.status())) {
    // Not a regular file of ours: what it is matters, not its size.
    struct stat st;
    if (::fstatat(f.shard.get(), name.file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return absl::NotFoundError("gone");
    }
    if (RejectedBefore(name, st)) return absl::FailedPreconditionError("rejected before");
    Reject(name, f.shard.get(), st, entry.status().message());
    return entry.status();
  }
  if (!entry.ok()) return absl::NotFoundError(entry.status().message());
  f.entry = *std::move(entry);
  const struct stat& st = f.entry.st;
  if (RejectedBefore(name, st)) return absl::FailedPreconditionError("rejected before");
  auto reject = [&](absl::string_view why) {
    Reject(name, f.shard.get(), st, why);
    return absl::DataLossError(why);
  };
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < kConstantFileHeaderBytes) return reject("truncated header");
  std::string head(kConstantFileHeaderBytes, '\0');
  if (absl::Status read = ReadExactly(f.entry.fd.get(), 0, head.data(), head.size(), name.path);
      !read.ok()) {
    return reject(read.message());
  }
  std::memcpy(&f.header, head.data(), sizeof(Header));
  std::memcpy(f.iv.data(), head.data() + kMacOffset, f.iv.size());
  std::memcpy(f.tag.data(), head.data() + kMacOffset + f.iv.size(), f.tag.size());
  const Header& h = f.header;
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return reject("bad magic");
  if (h.format != kConstantFileFormatVersion) return reject("other format version");
  if (h.payload_size != file_size - kConstantFileHeaderBytes) {
    return reject("truncated or oversized payload");
  }
  if (h.key_length != name.key.size() ||
      std::memcmp(head.data() + kKeyOffset, name.key.data(),
                  std::min(name.key.size(), kMaxStoredKey)) != 0) {
    return reject("other key");
  }
  if (size >= 0 && h.payload_size != static_cast<uint64_t>(size)) {
    // Equal keys mean equal bytes for a derived constant: this file is
    // wrong. A client's constant is named by its hash alone, and the graph
    // asking may be the one that is wrong about its size: not the file's
    // fault, nothing deleted (a good copy saved later replaces it).
    if (name.derived) return reject("other size than asked for");
    return absl::FailedPreconditionError("other size than asked for");
  }
  return f;
}

absl::Status ConstantFiles::ReadPayload(Opened& file, const Name& name, uint8_t* out) {
  const uint64_t size = file.header.payload_size;
  // In parallel: a copy of a large weight from the page cache takes a
  // while on one core.
  const int64_t chunks = static_cast<int64_t>((size + kReadChunk - 1) / kReadChunk);
  std::atomic<bool> failed{false};
  absl::Mutex error_mu;
  absl::Status error;
  runtime::ParallelFor(chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end && !failed.load(); ++c) {
      const uint64_t offset = static_cast<uint64_t>(c) * kReadChunk;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadChunk, size - offset));
      absl::Status s = ReadExactly(file.entry.fd.get(), kConstantFileHeaderBytes + offset,
                                   out + offset, n, name.path);
      if (!s.ok()) {
        failed = true;
        absl::MutexLock lock(&error_mu);
        error = std::move(s);
      }
    }
  });
  if (!failed.load()) return absl::OkStatus();
  if (absl::IsDataLoss(error)) Reject(name, file.shard.get(), file.entry.st, error.message());
  return error;
}

absl::Status ConstantFiles::Verify(const Name& name, const uint8_t* data, uint64_t size,
                                   const MacIv& iv, const MacTag& tag) {
  checked_bytes_ += size;
  if (!name.derived) {
    // The key is "h:<SHA-256 of the bytes>" (runtime::StoreConstantKey).
    if (DigestHex(Sha256(data, size)) != absl::string_view(name.key).substr(2)) {
      return absl::DataLossError("content does not match its hash");
    }
    return absl::OkStatus();
  }
  const std::optional<MacTag> expected = MacOf(*key_, iv, name.preimage, data, size);
  if (!expected.has_value() || !TagsEqual(*expected, tag)) {
    return absl::DataLossError("no valid MAC");
  }
  return absl::OkStatus();
}

bool ConstantFiles::CheckBeforeRead(const void* data) {
  std::shared_ptr<PendingCheck> check = checks_->Find(data);
  if (check == nullptr) return true;
  bool good;
  {
    // Concurrent readers wait here for the one checking.
    absl::MutexLock lock(&check->mu);
    if (check->state == PendingCheck::State::kPending && check->remote) {
      // Opened (its MAC checked) by the remote tier as it is read in.
      check->state = ReadInRemote(*check) ? PendingCheck::State::kGood
                                          : PendingCheck::State::kBad;
    }
    if (check->state == PendingCheck::State::kPending) {
      const Name name = NameFor(check->key, check->derived);
      absl::Status verified = absl::OkStatus();
      if (!check->read_in) {
        // Opened again: whatever is there now is read in, and it is that
        // copy that is checked and used.
        absl::StatusOr<Opened> file = OpenChecked(name, static_cast<int64_t>(check->size));
        verified = file.status();
        if (file.ok()) verified = ReadPayload(*file, name, check->data);
        if (file.ok() && verified.ok()) {
          check->read_in = true;
          check->iv = file->iv;
          check->tag = file->tag;
          check->st = file->entry.st;
        }
        if (absl::IsNotFound(verified)) {
          spdlog::info("cached constant {} was removed before it was read", name.path);
        }
      }
      if (check->read_in) {
        verified = Verify(name, check->data, check->size, check->iv, check->tag);
        if (!verified.ok()) {
          if (absl::StatusOr<FileDescriptor> shard =
                  store_->OpenShard("constants", name.shard, false);
              shard.ok()) {
            Reject(name, shard->get(), check->st, verified.message());
          }
        }
      }
      check->state = verified.ok() ? PendingCheck::State::kGood : PendingCheck::State::kBad;
    }
    good = check->state == PendingCheck::State::kGood;
  }
  if (good) {  // nothing to check any more
    absl::MutexLock lock(&checks_->mu);
    checks_->by_data.erase(data);
  }
  return good;
}

bool ConstantFiles::NotReadIn(const void* data) {
  std::shared_ptr<PendingCheck> check = checks_->Find(data);
  if (check == nullptr) return false;
  absl::MutexLock lock(&check->mu);
  return !check->read_in;
}

bool ConstantFiles::IsBad(const void* data) const {
  std::shared_ptr<PendingCheck> check = checks_->Find(data);
  if (check == nullptr) return false;
  absl::MutexLock lock(&check->mu);
  return check->state == PendingCheck::State::kBad;
}

std::optional<runtime::ConstantData> ConstantFiles::LoadFile(const std::string& key, bool derived,
                                                             int64_t size, bool defer_check,
                                                             bool mark_used) {
  defer_check = defer_check && deferring_.load();
  if (!Usable()) return std::nullopt;
  const Name name = NameFor(key, derived);
  absl::StatusOr<Opened> file = OpenChecked(name, size);
  if (!file.ok()) return std::nullopt;
  const uint64_t payload_size = file->header.payload_size;
  // Always the daemon's own copy, whenever read in; a check, whenever it
  // comes, is of that copy.
  const bool read_now = !defer_check || payload_size <= kReadAtLoadBytes;
  std::shared_ptr<uint8_t> bytes =
      AllocatePayload(payload_size, /*populate=*/read_now && payload_size <= kReadChunk);
  if (bytes == nullptr) return std::nullopt;
  if (read_now && !ReadPayload(*file, name, bytes.get()).ok()) return std::nullopt;
  if (!defer_check) {
    if (absl::Status verified = Verify(name, bytes.get(), payload_size, file->iv, file->tag);
        !verified.ok()) {
      Reject(name, file->shard.get(), file->entry.st, verified.message());
      return std::nullopt;
    }
  }
  // The LRU clock (artifact_store.h); failing to set it only ages the file.
  // Not when it is recent: a model's files are loaded a hundred at a time,
  // and an hour is fine resolution for eviction.
  if (mark_used && file->entry.st.st_mtime < ::time(nullptr) - 3600) {
    ::futimens(file->entry.fd.get(), nullptr);
  }
  {
    absl::MutexLock lock(&mu_);
    known_.insert(name.path);
  }
  loaded_bytes_ += payload_size;
  if (!defer_check) {
    return runtime::ConstantData{std::move(bytes), static_cast<int64_t>(payload_size)};
  }
  auto check = std::make_shared<PendingCheck>();
  check->read_in = read_now;
  check->data = bytes.get();
  check->size = payload_size;
  check->key = key;
  check->derived = derived;
  check->iv = file->iv;
  check->tag = file->tag;
  check->st = file->entry.st;
  return Deferred(std::move(bytes), std::move(check));
}

runtime::ConstantData ConstantFiles::Deferred(std::shared_ptr<uint8_t> bytes,
                                              std::shared_ptr<PendingCheck> check) {
  const uint8_t* raw = bytes.get();
  const auto size = static_cast<int64_t>(check->size);
  check->keeper = bytes;
  {
    absl::MutexLock lock(&checks_->mu);
    checks_->by_data[raw] = std::move(check);
  }
  // The check lives as long as the bytes it is of.
  auto release = [bytes = std::move(bytes), checks = checks_](const uint8_t* p) {
    absl::MutexLock lock(&checks->mu);
    checks->by_data.erase(p);
  };
  return runtime::ConstantData{std::shared_ptr<const uint8_t>(raw, std::move(release)), size};
}

std::optional<runtime::ConstantData> ConstantFiles::Load(const std::string& key, int64_t size,
                                                         bool defer_check) {
  std::optional<runtime::ConstantData> found = LoadFile(key, /*derived=*/true, size, defer_check);
  if (found || remote_ == nullptr || !Usable() || !SharedInFleet(key)) return found;
  if (defer_check && deferring_.load() && size > static_cast<int64_t>(kReadAtLoadBytes)) {
    // Fetched when first read: a fold that only fed a packing saved here
    // is never fetched. One that is not there is a miss now; one that is
    // there but then does not open fails its check, as a bad file does.
    if (!remote_->Has("derived", key)) return std::nullopt;
    std::shared_ptr<uint8_t> bytes = AllocatePayload(static_cast<uint64_t>(size), false);
    if (bytes == nullptr) return std::nullopt;
    auto check = std::make_shared<PendingCheck>();
    check->data = bytes.get();
    check->size = static_cast<uint64_t>(size);
    check->key = key;
    check->derived = true;
    check->remote = true;
    return Deferred(std::move(bytes), std::move(check));
  }
  // From the fleet: read straight into the daemon's copy and opened (its
  // MAC checked) there by the remote tier; saved here for the next start.
  uint64_t got = 0;
  std::shared_ptr<uint8_t> bytes =
      remote_->GetInto("derived", key, [size, &got](uint64_t bytes) -> std::shared_ptr<uint8_t> {
        if (size >= 0 && bytes != static_cast<uint64_t>(size)) return nullptr;
        got = bytes;
        return AllocatePayload(bytes, /*populate=*/true);
      });
  if (bytes == nullptr) return std::nullopt;
  runtime::ConstantData data{std::move(bytes), static_cast<int64_t>(got)};
  loaded_bytes_ += got;
  Enqueue(key, /*derived=*/true, data, /*publish=*/false);
  return data;
}

bool ConstantFiles::ReadInRemote(PendingCheck& check) {
  // Straight into the pending bytes, as a file is read in: bytes that then
  // fail their check are never used (the check is bad for good).
  const std::shared_ptr<uint8_t> fetched = remote_->GetInto(
      "derived", check.key, [&check](uint64_t bytes) -> std::shared_ptr<uint8_t> {
        if (bytes != check.size) return nullptr;
        return std::shared_ptr<uint8_t>(check.data, [](uint8_t*) {});
      });
  if (fetched == nullptr) {
    spdlog::info("derived constant {} is no longer in the fleet's tier", check.key.substr(0, 40));
    return false;
  }
  check.read_in = true;
  loaded_bytes_ += check.size;
  checked_bytes_ += check.size;
  // Saved here for the next start, from the daemon's copy (kept alive
  // until written).
  if (std::shared_ptr<uint8_t> kept = check.keeper.lock()) {
    Enqueue(check.key, /*derived=*/true,
            runtime::ConstantData{std::move(kept), static_cast<int64_t>(check.size)},
            /*publish=*/false);
  }
  return true;
}

void ConstantFiles::Save(const std::string& key, runtime::ConstantData data) {
  Enqueue(key, /*derived=*/true, std::move(data));
}

std::optional<runtime::ConstantData> ConstantFiles::LoadUploaded(const std::string& hash,
                                                                 int64_t size) {
  // Without a size from the graph there is no bound on what a file could
  // make the daemon read.
  if (size < 0) return std::nullopt;
  return LoadFile(runtime::StoreConstantKey(hash), /*derived=*/false, size, /*defer_check=*/true);
}

void ConstantFiles::SaveUploaded(const std::string& hash, runtime::ConstantData data) {
  Enqueue(runtime::StoreConstantKey(hash), /*derived=*/false, std::move(data));
}

bool ConstantFiles::HasUploaded(const std::string& hash) {
  if (!Usable()) return false;
  return OpenChecked(NameFor(runtime::StoreConstantKey(hash), false), -1).ok();
}

std::vector<ConstantFiles::Saved> ConstantFiles::List() {
  std::vector<Saved> saved;
  if (!Usable()) return saved;
  for (const ArtifactStore::StoredFile& f : store_->List("constants")) {
    const std::string file = fs::path(f.path).filename().string();
    // The store listed it from a checked directory; no link followed and
    // no FIFO waited on here either.
    FileDescriptor fd(::open(f.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    std::string head(kConstantFileHeaderBytes, '\0');
    if (!ReadExactly(fd.get(), 0, head.data(), head.size(), f.path).ok()) continue;
    Header h;
    std::memcpy(&h, head.data(), sizeof(h));
    // A key longer than the header holds cannot be named again.
    if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
        h.format != kConstantFileFormatVersion || h.key_length > kMaxStoredKey) {
      continue;
    }
    std::string key(head.data() + kKeyOffset, h.key_length);
    const bool derived = !absl::StartsWith(key, "h:");
    // Derived for another runtime or CPU, or not where its key puts it.
    if (NameFor(key, derived).file != file) continue;
    saved.push_back(Saved{std::move(key), derived, h.payload_size, f.mtime_s});
  }
  return saved;
}

std::optional<runtime::ConstantData> ConstantFiles::ReadSaved(const Saved& saved) {
  return LoadFile(saved.key, saved.derived, static_cast<int64_t>(saved.size),
                  /*defer_check=*/false, /*mark_used=*/false);
}

void ConstantFiles::Import(const Saved& saved, runtime::ConstantData data) {
  Enqueue(saved.key, saved.derived, std::move(data), /*publish=*/false);
}

void ConstantFiles::Enqueue(const std::string& key, bool derived, runtime::ConstantData data,
                            bool publish) {
  if (!Usable() || data.bytes == nullptr) return;
  const std::string path = PathFor(key, derived);
  absl::MutexLock lock(&mu_);
  if (failed_ || stopping_ || !known_.insert(path).second) return;
  // Saved before (maybe by another daemon): a regular file of the right
  // size. Anything else there is replaced by the rename.
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) ==
          kConstantFileHeaderBytes + static_cast<uint64_t>(data.size)) {
    return;
  }
  queue_.push_back(Pending{key, derived, std::move(data), publish});
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
    Write(NameFor(job.key, job.derived), job.data);
    // Derived constants go to the fleet too; clients' weights are
    // uploaded by each daemon's own clients, and packed weights are packed
    // again by each daemon (SharedInFleet).
    if (remote_ != nullptr && job.derived && job.publish && SharedInFleet(job.key)) {
      remote_->Put("derived", job.key,
                   absl::string_view(reinterpret_cast<const char*>(job.data.bytes.get()),
                                    static_cast<size_t>(job.data.size)));
    }
  }
}

void ConstantFiles::Write(const Name& name, const runtime::ConstantData& data) {
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
  absl::StatusOr<FileDescriptor> shard = store_->OpenShard("constants", name.shard, true);
  if (!shard.ok()) {
    if (absl::IsPermissionDenied(shard.status())) return;  // the store is off and said why
    return fail(std::string(shard.status().message()));
  }
  std::string header(kConstantFileHeaderBytes, '\0');
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format = kConstantFileFormatVersion;
  h.key_length = static_cast<uint32_t>(name.key.size());
  h.payload_size = static_cast<uint64_t>(data.size);
  std::memcpy(header.data(), &h, sizeof(h));
  std::memcpy(header.data() + kKeyOffset, name.key.data(),
              std::min(name.key.size(), kMaxStoredKey));
  if (name.derived) {
    const MacIv iv = RandomMacIv();
    const std::optional<MacTag> tag =
        MacOf(*key_, iv, name.preimage, data.bytes.get(), h.payload_size);
    if (!tag.has_value()) return fail("cannot compute a MAC (OpenSSL has no AES-256-GCM GMAC)");
    std::memcpy(header.data() + kMacOffset, iv.data(), iv.size());
    std::memcpy(header.data() + kMacOffset + iv.size(), tag->data(), tag->size());
  }
  // A unique temporary per writer: daemons sharing the directory never
  // write into each other's.
  std::random_device rd;
  const std::string tmp = absl::StrCat(name.file, ".tmp.", ::getpid(), ".", rd());
  const std::string tmp_path = absl::StrCat(name.path, ".tmp.", ::getpid());
  const int fd = ::openat(shard->get(), tmp.c_str(),
                          O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail(absl::StrCat("cannot write ", tmp_path, ": ", std::strerror(errno)));
  // No fsync: a torn file after a power cut fails its check, and a rename
  // makes the whole file visible at once to other daemons.
  const bool ok = WriteAll(fd, header.data(), header.size()) &&
                  WriteAll(fd, data.bytes.get(), static_cast<size_t>(data.size));
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlinkat(shard->get(), tmp.c_str(), 0);
    return fail(absl::StrCat("write to ", tmp_path, " failed: ", std::strerror(err)));
  }
  if (::renameat(shard->get(), tmp.c_str(), shard->get(), name.file.c_str()) != 0) {
    ::unlinkat(shard->get(), tmp.c_str(), 0);
    return fail(absl::StrCat("cannot rename into ", name.path));
  }
  {
    absl::MutexLock lock(&mu_);
    unremovable_.erase(name.path);
  }
  store_->Added(name.path, kConstantFileHeaderBytes + static_cast<uint64_t>(data.size));
}

}  // namespace kiln::cache
