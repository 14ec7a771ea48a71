// SHA-256 of byte ranges, as lowercase hex: the content hash of constants
// and the basis of cache keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::runtime {

std::string Sha256Hex(const void* data, size_t size);
inline std::string Sha256Hex(std::string_view s) { return Sha256Hex(s.data(), s.size()); }

}  // namespace kiln::runtime
