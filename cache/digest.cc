#include "cache/digest.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/exec/parallel.h"

namespace kiln::cache {

Digest Sha256(const void* data, size_t size) {
  Digest out;
  unsigned int len = 0;
  EVP_Digest(data, size, out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

Digest ChunkedSha256(const void* data, size_t size, bool parallel) {
  constexpr size_t kChunk = size_t{1} << 20;
  const auto* p = static_cast<const uint8_t*>(data);
  const int64_t chunks = static_cast<int64_t>((size + kChunk - 1) / kChunk);
  // The size first, then the chunks' digests.
  std::vector<uint8_t> list(sizeof(uint64_t) + static_cast<size_t>(chunks) * sizeof(Digest));
  const uint64_t size64 = size;
  std::memcpy(list.data(), &size64, sizeof(size64));
  auto hash = [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const size_t offset = static_cast<size_t>(c) * kChunk;
      const Digest d = Sha256(p + offset, std::min(kChunk, size - offset));
      std::memcpy(list.data() + sizeof(uint64_t) + static_cast<size_t>(c) * sizeof(Digest),
                  d.data(), d.size());
    }
  };
  if (parallel) {
    runtime::ParallelFor(chunks, 1, hash);
  } else {
    hash(0, chunks);
  }
  return Sha256(list.data(), list.size());
}

Digest HmacSha256(const Digest& key, std::string_view message) {
  Digest out;
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

bool DigestsEqual(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string DigestHex(const Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * d.size(), '0');
  for (size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  return out;
}

}  // namespace kiln::cache
