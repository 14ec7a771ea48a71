// Digests of cache files' payloads: SHA-256 (the content hash of a
// client's weight), and GMAC (AES-256-GCM over the bytes as additional
// data, NIST SP 800-38D) under cache/cache_key.h's key, for what only a
// daemon holding the key may have written. GMAC rather than HMAC-SHA256:
// with the CPU's carry-less multiply it runs several times faster than
// SHA-256, and a warm start checks every packed weight.
//
// Stateless and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::cache {

using Digest = std::array<uint8_t, 32>;

Digest Sha256(const void* data, size_t size);
std::string DigestHex(const Digest& d);

// A GMAC nonce. It must never repeat under one key (a repeat would let
// whoever sees both tags forge others): RandomMacIv draws 96 random bits,
// so a key would need billions of files before a repeat became likely.
using MacIv = std::array<uint8_t, 12>;
using MacTag = std::array<uint8_t, 16>;
MacIv RandomMacIv();

// The GMAC of the concatenation of `parts` under `key` and `iv`; nullopt
// if OpenSSL cannot compute one (then nothing is written or accepted).
std::optional<MacTag> Gmac(const Digest& key, const MacIv& iv,
                           std::initializer_list<std::string_view> parts);

// Compared in constant time: a forger learns nothing from how long a
// rejection took.
bool TagsEqual(const MacTag& a, const MacTag& b);

}  // namespace kiln::cache
