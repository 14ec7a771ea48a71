// A fast 64-bit checksum for large cache files (constants of hundreds of
// MB), catching truncation, torn writes and bit rot at memory speed. Not
// cryptographic: the cache directory is the user's own; content hashes
// (SHA-256) are for what clients send.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cache {

uint64_t Checksum64(const void* data, size_t size);

}  // namespace kiln::cache
