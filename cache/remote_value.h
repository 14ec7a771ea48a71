// What the remote tier (cache/redis_store.h) keeps under a name: a sealed
// payload that only a holder of the fleet's key can have written.
//
// Value = magic "KILNRMT\0" | u32 format | u64 payload size | 12-byte nonce
//         | 16-byte GMAC tag | payload
// The tag is a GMAC (cache/digest.h) under the fleet key of the kind
// ("artifact", "derived"), the name, the compiler version
// (cache/compiler_version.h), the CPU features, the size and the payload:
// a value moved under another name, made by another build or for another
// CPU, or written by anyone without the key, does not open.
//
// Stateless and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "cache/cache_key.h"
#include "cache/digest.h"

namespace kiln::cache {

inline constexpr uint32_t kRemoteValueFormat = 1;
// Bytes a value adds to its payload.
inline constexpr uint64_t kRemoteValueHeaderBytes = 8 + 4 + 8 + 12 + 16;

// The value holding `payload` under `name`; INTERNAL only when OpenSSL
// cannot compute a MAC.
absl::StatusOr<std::string> SealRemoteValue(const CacheKey& key, absl::string_view kind,
                                            absl::string_view name, absl::string_view payload);

// The payload of `value`, checked: DATA_LOSS saying why for a value that is
// not whole, of another format, or not sealed under `key` for this kind,
// name, compiler and CPU.
absl::StatusOr<std::string> OpenRemoteValue(const CacheKey& key, absl::string_view kind,
                                            absl::string_view name, absl::string_view value);

// OpenRemoteValue in two steps, for a reader that puts the payload straight
// where it will stay (RedisStore::GetInto): the header, from a value's
// first kRemoteValueHeaderBytes (DATA_LOSS: not a value of this format),
// then the payload against it, once all of it is in the reader's memory.
struct RemoteValueHeader {
  uint64_t payload_bytes = 0;
  MacIv iv{};
  MacTag tag{};
};
absl::StatusOr<RemoteValueHeader> ReadRemoteValueHeader(absl::string_view head);
absl::Status CheckRemotePayload(const CacheKey& key, absl::string_view kind,
                                absl::string_view name, const RemoteValueHeader& header,
                                absl::string_view payload);

}  // namespace kiln::cache
