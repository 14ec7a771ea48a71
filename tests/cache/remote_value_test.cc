// Values of the fleet's Redis tier: sealed under the fleet key for one
// kind and name; anything else (another key, kind or name, a changed or
// truncated byte, another format) does not open.
#include "cache/remote_value.h"

#include <string>
#include <tuple>

#include "gtest/gtest.h"

namespace kiln::cache {
namespace {

CacheKey KeyOf(uint8_t b) {
  CacheKey k;
  k.fill(b);
  return k;
}

TEST(RemoteValue, OpensWhatItSealed) {
  const std::string payload(1000, 'p');
  auto value = SealRemoteValue(KeyOf(1), "artifact", "abc", payload);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(value->size(), payload.size() + kRemoteValueHeaderBytes);
  auto opened = OpenRemoteValue(KeyOf(1), "artifact", "abc", *value);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(*opened, payload);
  auto empty = SealRemoteValue(KeyOf(1), "derived", "d:x", "");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*OpenRemoteValue(KeyOf(1), "derived", "d:x", *empty), "");
}

TEST(RemoteValue, AnotherKeyKindOrNameDoesNotOpen) {
  const std::string value = *SealRemoteValue(KeyOf(1), "artifact", "abc", "payload");
  for (auto [key, kind, name] : {std::tuple{KeyOf(2), "artifact", "abc"},
                                 std::tuple{KeyOf(1), "derived", "abc"},
                                 std::tuple{KeyOf(1), "artifact", "abd"}}) {
    auto opened = OpenRemoteValue(key, kind, name, value);
    EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(opened.status().message().find("no valid MAC"), std::string::npos);
  }
}

TEST(RemoteValue, EveryChangedOrMissingByteIsRefused) {
  const std::string value = *SealRemoteValue(KeyOf(1), "artifact", "abc", "payload bytes");
  for (size_t i = 0; i < value.size(); ++i) {
    std::string changed = value;
    changed[i] ^= 0x01;
    EXPECT_FALSE(OpenRemoteValue(KeyOf(1), "artifact", "abc", changed).ok()) << "byte " << i;
  }
  for (size_t keep = 0; keep < value.size(); ++keep) {
    EXPECT_FALSE(OpenRemoteValue(KeyOf(1), "artifact", "abc", value.substr(0, keep)).ok())
        << "kept " << keep;
  }
  EXPECT_FALSE(OpenRemoteValue(KeyOf(1), "artifact", "abc", value + "x").ok());
}

}  // namespace
}  // namespace kiln::cache
