// AllocateLarge (runtime/util/large_alloc.h): small buffers from the heap,
// large ones mapped on their own with their whole 2 MiB pages advised as
// huge pages (the kernel reports the advice in /proc/self/smaps), every
// byte usable and a page past the end readable, and the memory given back.
#include "runtime/util/large_alloc.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// The smaps block of the mapping that holds `p`, or "" when none does.
std::string SmapsOf(const void* p) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  std::string line, block;
  bool in = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      if (in) return block;
      in = lo <= addr && addr < hi;
      block.clear();
    }
    if (in) block += line + "\n";
  }
  return in ? block : "";
}

bool ThpAvailable() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(f, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

TEST(LargeAlloc, EveryByteOfEverySizeIsUsable) {
  for (size_t bytes : {size_t{1}, size_t{4096}, kHugePageBytes - 1, kHugePageBytes,
                       kHugePageBytes * 3 + 4097}) {
    auto* p = static_cast<uint8_t*>(AllocateLarge(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    if (bytes >= kHugePageBytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePageBytes, 0u) << bytes;
      // A vector load that starts at the last byte reads the page after
      // it: mapped, zeros (a fault here is a daemon crash).
      const size_t past = (bytes + 4095) / 4096 * 4096 + 4095;
      EXPECT_EQ(static_cast<volatile uint8_t*>(p)[past], 0) << bytes;
    }
    std::memset(p, 0xab, bytes);
    EXPECT_EQ(p[0], 0xab);
    EXPECT_EQ(p[bytes - 1], 0xab);
    FreeLarge(p, bytes);
  }
}

TEST(LargeAlloc, LargeBuffersAreAdvisedAsHugePages) {
  if (!ThpAvailable()) GTEST_SKIP() << "transparent huge pages are off on this host";
  const size_t bytes = kHugePageBytes * 4;
  std::shared_ptr<uint8_t> p = SharedLarge(bytes);
  ASSERT_NE(p, nullptr);
  const std::string smaps = SmapsOf(p.get());
  ASSERT_FALSE(smaps.empty());
  // The advice shows in the mapping's flags ("hg") and makes it eligible.
  std::istringstream eligible(smaps.substr(smaps.find("THPeligible:") + 12));
  int flag = 0;
  EXPECT_TRUE(eligible >> flag && flag == 1) << smaps;
  EXPECT_NE(smaps.find(" hg"), std::string::npos) << smaps;
  const void* at = p.get();
  p.reset();
  EXPECT_EQ(SmapsOf(at), "") << "the mapping outlived its buffer";
}

TEST(LargeAlloc, SmallBuffersComeFromTheHeap) {
  std::shared_ptr<uint8_t> p = SharedLarge(1000);
  ASSERT_NE(p, nullptr);
  // The heap's mapping, not one of its own: no advice.
  EXPECT_EQ(SmapsOf(p.get()).find(" hg"), std::string::npos);
}

}  // namespace
}  // namespace kiln::runtime
