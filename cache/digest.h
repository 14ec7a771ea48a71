// Digests of cache files' payloads: SHA-256, a SHA-256 tree whose chunks
// hash on every core, and HMAC-SHA256 (keyed with cache/cache_key.h's
// secret) for what only a daemon holding the key may have written.
//
// Stateless and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cache {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(const void* data, size_t size);

// SHA-256 of the payload's size and of the SHA-256 of each consecutive
// 1 MiB chunk (the last one shorter): collision-resistant as SHA-256 is,
// while the chunks are hashed in parallel. `parallel`: on the calling
// arena's threads.
Digest ChunkedSha256(const void* data, size_t size, bool parallel = true);

Digest HmacSha256(const Digest& key, std::string_view message);

// Compared in constant time: a forger learns nothing from how long a
// rejection took.
bool DigestsEqual(const Digest& a, const Digest& b);

std::string DigestHex(const Digest& d);

}  // namespace kiln::cache
