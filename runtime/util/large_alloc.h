// Memory for the large buffers every run reads again: packed weights, run
// arenas, the daemon's copies of constants.
//
// A run streams through these (a ResNeXt-101's 777 MB of weights at batch
// 1), and with 4 KiB pages the translation of every page costs a page
// walk. Above 2 MiB the buffer is mapped on its own and its whole 2 MiB
// pages are advised to the kernel as transparent huge pages
// (MADV_HUGEPAGE: honoured where /sys/kernel/mm/transparent_hugepage is
// "madvise" or "always"); a partial last page stays in 4 KiB pages, so no
// buffer takes more memory than it asks for. Smaller buffers come from the
// heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln::runtime {

// Buffers at least this large get a mapping of their own.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` of memory, 64-byte aligned (2 MiB aligned from kHugePageBytes
// on, with a readable page past the end), or null when there is none. Its
// contents are unspecified (zeros for a mapping). Free with FreeLarge and
// the same size.
void* AllocateLarge(size_t bytes);
void FreeLarge(void* p, size_t bytes);

// AllocateLarge's memory owned by a shared pointer (null when there is
// none).
std::shared_ptr<uint8_t> SharedLarge(size_t bytes);

}  // namespace kiln::runtime
