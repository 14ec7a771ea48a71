#include "cache/constant_store.h"

#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cache/constant_files.h"
#include "runtime/util/large_alloc.h"
#include "runtime/util/sha256.h"
#include "runtime/util/status_macros.h"

namespace kiln::cache {

absl::StatusOr<std::shared_ptr<uint8_t>> ConstantStore::Allocate(int64_t size) {
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("constant of ", size, " bytes"));
  const size_t alloc = (static_cast<size_t>(size) + 63) / 64 * 64 + 64;
  std::shared_ptr<uint8_t> raw = runtime::SharedLarge(alloc);
  if (raw == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes"));
  }
  return raw;
}

absl::StatusOr<bool> ConstantStore::Put(const std::string& hash, runtime::ConstantData owned) {
  if (InMemory(hash)) return false;
  // Hash outside the lock: it is the slow part.
  if (runtime::Sha256Hex(owned.bytes.get(), static_cast<size_t>(owned.size)) != hash) {
    return absl::InvalidArgumentError(
        absl::StrCat("constant bytes do not match their hash ", hash));
  }
  const int64_t size = owned.size;
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.emplace(hash, Entry{std::move(owned), absl::Now()});
  if (inserted) bytes_ += size;
  return inserted;
}

absl::StatusOr<bool> ConstantStore::PutCopy(const std::string& hash, const void* data,
                                            int64_t size) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<uint8_t> bytes, Allocate(size));
  std::memcpy(bytes.get(), data, static_cast<size_t>(size));
  return Put(hash, runtime::ConstantData{std::move(bytes), size});
}

absl::StatusOr<runtime::ConstantData> ConstantStore::Get(const std::string& hash,
                                                         int64_t size) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(hash);
    if (it != entries_.end()) {
      it->second.touched = absl::Now();
      return it->second.data;
    }
  }
  // Mapped outside the lock: checking a large file takes a while.
  std::optional<runtime::ConstantData> saved =
      files_ == nullptr ? std::nullopt : files_->LoadUploaded(hash, size);
  if (!saved) return absl::NotFoundError(absl::StrCat("constant ", hash, " not found"));
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = entries_.emplace(hash, Entry{*std::move(saved), absl::Now()});
  if (inserted) bytes_ += it->second.data.size;
  it->second.touched = absl::Now();
  return it->second.data;
}

bool ConstantStore::InMemory(const std::string& hash) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end()) return false;
  it->second.touched = absl::Now();
  return true;
}

bool ConstantStore::Contains(const std::string& hash) const {
  if (InMemory(hash)) return true;
  // Its bytes are not checked here: Get checks them, and a compile that
  // finds them bad fails as for any missing constant (the client uploads
  // it). A file that cannot be used at all is gone after this.
  return files_ != nullptr && files_->HasUploaded(hash);
}

void ConstantStore::Drop(const std::string& hash, const void* bytes) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.data.bytes.get() != bytes) return;
  bytes_ -= it->second.data.size;
  entries_.erase(it);
}

bool ConstantStore::ReleaseIfUnheld(const std::string& hash) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(hash);
  if (it == entries_.end() || it->second.data.bytes.use_count() != 1) return false;
  bytes_ -= it->second.data.size;
  entries_.erase(it);
  return true;
}

ConstantStore::Evicted ConstantStore::EvictUnreferenced(absl::Duration grace, absl::Time now) {
  Evicted evicted;
  absl::MutexLock lock(&mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const Entry& e = it->second;
    // use_count 1: only this map holds the bytes (compiled graphs and
    // templates hold copies of the shared_ptr).
    if (e.data.bytes.use_count() == 1 && now - e.touched >= grace) {
      evicted.count++;
      evicted.bytes += e.data.size;
      bytes_ -= e.data.size;
      entries_.erase(it++);
    } else {
      ++it;
    }
  }
  return evicted;
}

size_t ConstantStore::count() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

int64_t ConstantStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace kiln::cache
