#include "runtime/util/large_alloc.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace kiln::runtime {
namespace {

constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The bytes a mapped buffer keeps: its pages and one more.
size_t Kept(size_t bytes) { return RoundUp(bytes, kPage) + kPage; }

}  // namespace

void* AllocateLarge(size_t bytes) {
  if (bytes < kHugePageBytes) return std::aligned_alloc(64, RoundUp(bytes == 0 ? 1 : bytes, 64));
  // Over-map by one huge page, keep the 2 MiB-aligned part and one page
  // past the end: vector loads may read a little past the last byte, as
  // they may past a heap buffer's.
  const size_t kept = Kept(bytes);
  const size_t mapped = kept + kHugePageBytes;
  void* raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(begin, kHugePageBytes);
  const uintptr_t end = begin + mapped, used_end = aligned + kept;
  if (aligned > begin) ::munmap(raw, aligned - begin);
  if (end > used_end) ::munmap(reinterpret_cast<void*>(used_end), end - used_end);
  // Advice only: a kernel without transparent huge pages refuses it and
  // the buffer works all the same.
  const size_t whole = bytes / kHugePageBytes * kHugePageBytes;
  ::madvise(reinterpret_cast<void*>(aligned), whole, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreeLarge(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    std::free(p);
    return;
  }
  ::munmap(p, Kept(bytes));
}

std::shared_ptr<uint8_t> SharedLarge(size_t bytes) {
  void* p = AllocateLarge(bytes);
  if (p == nullptr) return nullptr;
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p),
                                  [bytes](uint8_t* q) { FreeLarge(q, bytes); });
}

}  // namespace kiln::runtime
