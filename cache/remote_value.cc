#include "cache/remote_value.h"

#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "cache/compiler_version.h"
#include "cache/digest.h"
#include "runtime/util/cpu_features.h"

namespace kiln::cache {
namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'R', 'M', 'T', '\0'};

std::optional<MacTag> ValueMac(const CacheKey& key, const MacIv& iv, absl::string_view kind,
                               absl::string_view name, absl::string_view payload) {
  const uint64_t size = payload.size();
  std::string prefix = absl::StrCat("kiln remote value\n", kind, "\n", name, "\n",
                                    CompilerVersion(), "\n", runtime::CpuFeatureString(), "\n");
  prefix.append(reinterpret_cast<const char*>(&size), sizeof(size));
  return Gmac(key, iv, {prefix, std::string_view(payload.data(), payload.size())});
}

}  // namespace

absl::StatusOr<std::string> SealRemoteValue(const CacheKey& key, absl::string_view kind,
                                            absl::string_view name, absl::string_view payload) {
  const MacIv iv = RandomMacIv();
  const std::optional<MacTag> tag = ValueMac(key, iv, kind, name, payload);
  if (!tag) return absl::InternalError("no MAC (OpenSSL)");
  std::string value(kMagic, sizeof(kMagic));
  const uint32_t format = kRemoteValueFormat;
  const uint64_t size = payload.size();
  value.append(reinterpret_cast<const char*>(&format), sizeof(format));
  value.append(reinterpret_cast<const char*>(&size), sizeof(size));
  value.append(reinterpret_cast<const char*>(iv.data()), iv.size());
  value.append(reinterpret_cast<const char*>(tag->data()), tag->size());
  value.append(payload.data(), payload.size());
  return value;
}

absl::StatusOr<RemoteValueHeader> ReadRemoteValueHeader(absl::string_view head) {
  if (head.size() < kRemoteValueHeaderBytes) return absl::DataLossError("truncated header");
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("bad magic");
  }
  uint32_t format;
  RemoteValueHeader header;
  const char* p = head.data() + sizeof(kMagic);
  std::memcpy(&format, p, sizeof(format));
  p += sizeof(format);
  std::memcpy(&header.payload_bytes, p, sizeof(header.payload_bytes));
  p += sizeof(header.payload_bytes);
  std::memcpy(header.iv.data(), p, header.iv.size());
  p += header.iv.size();
  std::memcpy(header.tag.data(), p, header.tag.size());
  if (format != kRemoteValueFormat) return absl::DataLossError("other format version");
  return header;
}

absl::Status CheckRemotePayload(const CacheKey& key, absl::string_view kind,
                                absl::string_view name, const RemoteValueHeader& header,
                                absl::string_view payload) {
  if (header.payload_bytes != payload.size()) {
    return absl::DataLossError("truncated or oversized payload");
  }
  const std::optional<MacTag> expected = ValueMac(key, header.iv, kind, name, payload);
  if (!expected || !TagsEqual(*expected, header.tag)) return absl::DataLossError("no valid MAC");
  return absl::OkStatus();
}

absl::StatusOr<std::string> OpenRemoteValue(const CacheKey& key, absl::string_view kind,
                                            absl::string_view name, absl::string_view value) {
  absl::StatusOr<RemoteValueHeader> header = ReadRemoteValueHeader(value);
  if (!header.ok()) return header.status();
  const absl::string_view payload = value.substr(kRemoteValueHeaderBytes);
  if (absl::Status checked = CheckRemotePayload(key, kind, name, *header, payload);
      !checked.ok()) {
    return checked;
  }
  return std::string(payload);
}

}  // namespace kiln::cache
