// A fast 64-bit checksum for large cache files (constants of hundreds of
// MB), catching truncation, torn writes and bit rot at memory speed. Not
// cryptographic: the cache directory is the user's own; content hashes
// (SHA-256) are for what clients send.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln::cache {

uint64_t Checksum64(const void* data, size_t size);

// Checksum64 of the Checksum64s of consecutive 1 MiB chunks (the last one
// shorter). `parallel`: on the calling arena's threads, so verifying a
// large mapped file reads it (and faults its pages in) from every core.
uint64_t ChunkedChecksum64(const void* data, size_t size, bool parallel = true);

}  // namespace kiln::cache
