#include "cache/checksum.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/exec/parallel.h"

namespace kiln::cache {
namespace {

constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;  // odd constants with well-mixed bits
constexpr uint64_t kMulB = 0xD6E8FEB86659FD93ull;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

inline uint64_t Step(uint64_t lane, uint64_t word) { return Rotl(lane ^ (word * kMulB), 31) * kMulA; }

inline uint64_t Finish(uint64_t h) {
  h ^= h >> 32;
  h *= kMulB;
  h ^= h >> 29;
  h *= kMulA;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t Checksum64(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  // Four independent lanes so the multiplies overlap.
  uint64_t lane[4] = {kMulA, kMulB, ~kMulA, ~kMulB};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    lane[0] = Step(lane[0], Load64(p + i));
    lane[1] = Step(lane[1], Load64(p + i + 8));
    lane[2] = Step(lane[2], Load64(p + i + 16));
    lane[3] = Step(lane[3], Load64(p + i + 24));
  }
  uint64_t h = Rotl(lane[0], 1) + Rotl(lane[1], 7) + Rotl(lane[2], 12) + Rotl(lane[3], 18);
  for (; i + 8 <= size; i += 8) h = Step(h, Load64(p + i));
  for (; i < size; ++i) h = Step(h, p[i]);
  return Finish(h ^ size);
}

uint64_t ChunkedChecksum64(const void* data, size_t size, bool parallel) {
  constexpr size_t kChunk = size_t{1} << 20;
  const auto* p = static_cast<const uint8_t*>(data);
  const int64_t chunks = static_cast<int64_t>((size + kChunk - 1) / kChunk);
  std::vector<uint64_t> sums(static_cast<size_t>(chunks));
  auto sum = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t offset = static_cast<size_t>(c) * kChunk;
      sums[static_cast<size_t>(c)] = Checksum64(p + offset, std::min(kChunk, size - offset));
    }
  };
  if (parallel) {
    runtime::ParallelFor(chunks, 1, sum);
  } else {
    sum(0, chunks);
  }
  return Checksum64(sums.data(), sums.size() * sizeof(uint64_t)) ^ size;
}

}  // namespace kiln::cache
