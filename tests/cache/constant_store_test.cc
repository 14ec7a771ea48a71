// The constant store: content-checked puts, and eviction of constants no
// compiled graph holds once their grace period has passed.
#include "cache/constant_store.h"

#include <vector>

#include "gtest/gtest.h"
#include "runtime/util/sha256.h"

namespace kiln::cache {
namespace {

struct Blob {
  std::vector<float> values;
  std::string hash;
  explicit Blob(float v, size_t n = 256) : values(n, v) {
    hash = runtime::Sha256Hex(values.data(), values.size() * sizeof(float));
  }
  int64_t size() const { return static_cast<int64_t>(values.size() * sizeof(float)); }
};

TEST(ConstantStore, RefusesBytesThatDoNotMatchTheirHash) {
  ConstantStore store;
  Blob a(1.f), b(2.f);
  auto put = store.PutCopy(a.hash, b.values.data(), b.size());
  EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store.Contains(a.hash));
}

TEST(ConstantStore, EvictsOnlyUnheldConstantsPastTheirGrace) {
  ConstantStore store;
  Blob held(1.f), free(2.f);
  ASSERT_TRUE(store.PutCopy(held.hash, held.values.data(), held.size()).ok());
  ASSERT_TRUE(store.PutCopy(free.hash, free.values.data(), free.size()).ok());
  auto in_use = store.Get(held.hash, held.size());  // as a compiled graph holds it
  ASSERT_TRUE(in_use.ok());
  const absl::Duration grace = absl::Seconds(30);

  // Within the grace period nothing goes, held or not.
  auto none = store.EvictUnreferenced(grace, absl::Now() + absl::Seconds(10));
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(store.count(), 2u);

  auto evicted = store.EvictUnreferenced(grace, absl::Now() + absl::Seconds(31));
  EXPECT_EQ(evicted.count, 1u);
  EXPECT_EQ(evicted.bytes, free.size());
  EXPECT_TRUE(store.Contains(held.hash));
  EXPECT_FALSE(store.Contains(free.hash));
  EXPECT_EQ(store.bytes(), held.size());

  // Released by its last user: goes once its grace has passed.
  *in_use = {};
  EXPECT_EQ(store.EvictUnreferenced(grace, absl::Now() + absl::Seconds(5)).count, 0u);
  EXPECT_EQ(store.EvictUnreferenced(grace, absl::Now() + absl::Seconds(31)).count, 1u);
  EXPECT_EQ(store.count(), 0u);
  EXPECT_EQ(store.bytes(), 0);
}

TEST(ConstantStore, ReleasesAConstantAtOnceOnlyWhenNothingElseHoldsIt) {
  // What a compile that packed a weight asks for: held elsewhere (another
  // compile, a graph template), it stays; unheld, it goes within its grace.
  ConstantStore store;
  Blob weight(3.f);
  ASSERT_TRUE(store.PutCopy(weight.hash, weight.values.data(), weight.size()).ok());
  auto other = store.Get(weight.hash, weight.size());
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(store.ReleaseIfUnheld(weight.hash));
  EXPECT_TRUE(store.InMemory(weight.hash));
  *other = {};
  EXPECT_TRUE(store.ReleaseIfUnheld(weight.hash));
  EXPECT_FALSE(store.Contains(weight.hash));
  EXPECT_EQ(store.bytes(), 0);
  EXPECT_FALSE(store.ReleaseIfUnheld(weight.hash));  // gone already
}

TEST(ConstantStore, AskingAboutAConstantRestartsItsGrace) {
  ConstantStore store;
  Blob a(3.f);
  ASSERT_TRUE(store.PutCopy(a.hash, a.values.data(), a.size()).ok());
  // A client that has just checked the constant is about to compile with
  // it: Contains() counts as use.
  EXPECT_TRUE(store.Contains(a.hash));
  const absl::Time checked = absl::Now();
  EXPECT_EQ(store.EvictUnreferenced(absl::Seconds(30), checked + absl::Seconds(29)).count, 0u);
  EXPECT_EQ(store.EvictUnreferenced(absl::Seconds(30), checked + absl::Seconds(31)).count, 1u);
}

}  // namespace
}  // namespace kiln::cache
