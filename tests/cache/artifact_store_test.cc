// The on-disk artifact store: round trip, and every kind of bad entry is a
// miss that removes the file, never a crash or a wrong payload; the size cap
// evicts least recently used entries, counting other daemons' writes; two
// stores on one directory, used from many threads, never see a torn entry.
#include "cache/artifact_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cache/compiler_version.h"
#include "gtest/gtest.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/sha256.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;

class ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-artifact-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string ReadFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void WriteFile(const std::string& path, const std::string& data) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << data;
  }

  // Sets the LRU clock of `key`'s entry to `seconds_ago` in the past.
  void Age(const ArtifactStore& store, const std::string& key, int seconds_ago) {
    fs::last_write_time(store.PathFor(key),
                        fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
  }
  static std::string Key(char c) { return std::string(64, c); }

  fs::path dir_;
  const std::string key_ = std::string(64, 'a');
  const std::string payload_ = std::string(1000, 'p');
};

TEST_F(ArtifactStoreTest, RoundTripSurvivesANewStoreObject) {
  {
    ArtifactStore store(dir_.string());
    ASSERT_TRUE(store.enabled());
    store.Store(key_, "payload bytes");
  }
  ArtifactStore reopened(dir_.string());
  auto loaded = reopened.Load(key_);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, "payload bytes");
  EXPECT_FALSE(reopened.Load(std::string(64, 'b')).has_value());
}

TEST_F(ArtifactStoreTest, CorruptPayloadIsAMissAndTheEntryIsRemoved) {
  ArtifactStore store(dir_.string());
  store.Store(key_, "payload bytes");
  std::string data = ReadFile(store.PathFor(key_));
  data.back() ^= 0x5a;
  WriteFile(store.PathFor(key_), data);
  EXPECT_FALSE(store.Load(key_).has_value());
  EXPECT_FALSE(fs::exists(store.PathFor(key_)));
}

// Where the payload's SHA-256 (64 hex digits) sits in an entry's header.
size_t ChecksumOffset() {
  return 8 + 4 + 4 + std::strlen(CompilerVersion()) + 4 + runtime::CpuFeatureString().size() + 8;
}

TEST_F(ArtifactStoreTest, PayloadWithAMatchingChecksumButNoValidMacIsAMiss) {
  ArtifactStore store(dir_.string());
  store.Store(key_, "payload bytes");
  std::string data = ReadFile(store.PathFor(key_));
  // Another payload of the same size, its checksum written in: only the
  // MAC can tell.
  const std::string forged = "PAYLOAD BYTES";
  data.replace(data.size() - forged.size(), forged.size(), forged);
  data.replace(ChecksumOffset(), 64, runtime::Sha256Hex(forged));
  WriteFile(store.PathFor(key_), data);
  EXPECT_FALSE(store.Load(key_).has_value());
  EXPECT_FALSE(fs::exists(store.PathFor(key_)));
}

TEST_F(ArtifactStoreTest, EntryOfAnotherDirectoryOrAnotherKeyIsAMiss) {
  const fs::path other = dir_ / "other";
  ArtifactStore store(dir_.string());
  ArtifactStore elsewhere(other.string());
  ASSERT_TRUE(store.enabled() && elsewhere.enabled());
  ASSERT_NE(*store.key(), *elsewhere.key());
  elsewhere.Store(key_, "payload bytes");
  store.Store(Key('b'), "payload bytes");
  // A whole entry of another directory (written under its key), and one of
  // this directory moved under another graph key.
  fs::create_directories(fs::path(store.PathFor(key_)).parent_path());
  fs::copy_file(elsewhere.PathFor(key_), store.PathFor(key_));
  EXPECT_FALSE(store.Load(key_).has_value());
  fs::create_directories(fs::path(store.PathFor(Key('c'))).parent_path());
  fs::rename(store.PathFor(Key('b')), store.PathFor(Key('c')));
  EXPECT_FALSE(store.Load(Key('c')).has_value());
  EXPECT_EQ(*elsewhere.Load(key_), "payload bytes");
}

TEST_F(ArtifactStoreTest, TruncatedEntryIsAMiss) {
  ArtifactStore store(dir_.string());
  store.Store(key_, std::string(1000, 'x'));
  std::string data = ReadFile(store.PathFor(key_));
  for (size_t keep : {size_t{0}, size_t{5}, size_t{20}, data.size() - 1}) {
    WriteFile(store.PathFor(key_), data.substr(0, keep));
    EXPECT_FALSE(store.Load(key_).has_value()) << "kept " << keep << " bytes";
  }
}

TEST_F(ArtifactStoreTest, EntryFromAnotherFormatVersionIsAMiss) {
  ArtifactStore store(dir_.string());
  store.Store(key_, "payload");
  std::string data = ReadFile(store.PathFor(key_));
  uint32_t other = kArtifactFormatVersion + 1;
  data.replace(8, 4, reinterpret_cast<const char*>(&other), 4);
  WriteFile(store.PathFor(key_), data);
  EXPECT_FALSE(store.Load(key_).has_value());
}

TEST_F(ArtifactStoreTest, UnusableDirectoryDisablesCachingWithoutFailing) {
  fs::create_directories(dir_);
  WriteFile((dir_ / "file").string(), "not a directory");
  ArtifactStore store((dir_ / "file" / "cache").string());
  EXPECT_FALSE(store.enabled());
  store.Store(key_, "payload");  // a no-op, not a crash
  EXPECT_FALSE(store.Load(key_).has_value());
}

TEST_F(ArtifactStoreTest, LeavesNoTemporaryFilesBehind) {
  ArtifactStore store(dir_.string());
  for (int i = 0; i < 10; ++i) store.Store(key_, "v" + std::to_string(i));
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "artifacts")) {
    files += e.is_regular_file();
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(*store.Load(key_), "v9");
}

TEST_F(ArtifactStoreTest, EvictionKeepsTheRecentlyLoadedEntryAndRemovesTheOldest) {
  uint64_t entry = 0;
  {
    ArtifactStore uncapped(dir_.string(), 0);
    for (char c : {'a', 'b', 'c'}) uncapped.Store(Key(c), payload_);
    entry = fs::file_size(uncapped.PathFor(Key('a')));
    Age(uncapped, Key('a'), 300);
    Age(uncapped, Key('b'), 200);
    Age(uncapped, Key('c'), 100);
  }
  // Room for three and a half entries; the scan at construction counts three.
  ArtifactStore store(dir_.string(), entry * 7 / 2);
  EXPECT_EQ(store.total_bytes(), 3 * entry);
  ASSERT_TRUE(store.Load(Key('a')).has_value());  // now the most recent
  store.Store(Key('d'), payload_);
  EXPECT_TRUE(fs::exists(store.PathFor(Key('a'))));
  EXPECT_FALSE(fs::exists(store.PathFor(Key('b'))));
  EXPECT_TRUE(fs::exists(store.PathFor(Key('c'))));
  EXPECT_TRUE(fs::exists(store.PathFor(Key('d'))));
  EXPECT_EQ(store.total_bytes(), 3 * entry);
}

TEST_F(ArtifactStoreTest, EvictionNeverRemovesTheEntryJustWritten) {
  ArtifactStore store(dir_.string(), 1);  // smaller than any entry
  store.Store(Key('a'), payload_);
  Age(store, Key('a'), 100);
  store.Store(Key('b'), payload_);
  EXPECT_FALSE(fs::exists(store.PathFor(Key('a'))));
  ASSERT_TRUE(store.Load(Key('b')).has_value());
}

TEST_F(ArtifactStoreTest, ZeroCapMeansUnlimited) {
  ArtifactStore store(dir_.string(), 0);
  for (char c = 'a'; c < 'a' + 20; ++c) store.Store(Key(c), payload_);
  const uint64_t entry = fs::file_size(store.PathFor(Key('a')));
  for (char c = 'a'; c < 'a' + 20; ++c) EXPECT_TRUE(fs::exists(store.PathFor(Key(c)))) << c;
  EXPECT_EQ(store.total_bytes(), 20 * entry);
}

TEST_F(ArtifactStoreTest, ReplacingAnEntryIsNotCountedTwice) {
  ArtifactStore store(dir_.string(), 0);
  store.Store(key_, payload_);
  store.Store(key_, payload_);
  EXPECT_EQ(store.total_bytes(), fs::file_size(store.PathFor(key_)));
}

TEST_F(ArtifactStoreTest, EntryWrittenByAnotherDaemonIsCountedAfterARescan) {
  ArtifactStore probe(dir_.string(), 0);
  probe.Store(Key('z'), payload_);
  const uint64_t entry = fs::file_size(probe.PathFor(Key('z')));
  fs::remove(probe.PathFor(Key('z')));

  // Room for two and a half entries.
  ArtifactStore ours(dir_.string(), entry * 5 / 2);
  ArtifactStore theirs(dir_.string(), entry * 5 / 2);
  ours.Store(Key('a'), payload_);
  ours.Store(Key('b'), payload_);
  theirs.Store(Key('c'), payload_);
  Age(ours, Key('a'), 300);
  Age(ours, Key('b'), 200);
  Age(ours, Key('c'), 100);
  EXPECT_EQ(ours.total_bytes(), 2 * entry);  // does not know about 'c' yet
  EXPECT_EQ(ours.Rescan(), 3 * entry);

  // Our own figure goes over the cap, the rescan finds four entries, and
  // the two oldest go (one would be enough by our own count).
  ours.Store(Key('d'), payload_);
  EXPECT_FALSE(fs::exists(ours.PathFor(Key('a'))));
  EXPECT_FALSE(fs::exists(ours.PathFor(Key('b'))));
  EXPECT_TRUE(fs::exists(ours.PathFor(Key('c'))));
  EXPECT_TRUE(fs::exists(ours.PathFor(Key('d'))));
  EXPECT_EQ(ours.total_bytes(), 2 * entry);
}

TEST_F(ArtifactStoreTest, ScanRemovesStaleTemporariesAndNothingElse) {
  const fs::path shard = dir_ / "artifacts" / "aa";
  fs::create_directories(shard);
  const fs::path stale = shard / (key_ + ".kart.tmp.123.456");
  const fs::path fresh = shard / (key_ + ".kart.tmp.123.789");
  const fs::path unrelated = shard / "notes.txt";
  const fs::path top = dir_ / "other-tool-data";
  for (const fs::path& p : {stale, fresh, unrelated, top}) WriteFile(p.string(), "x");
  fs::last_write_time(stale, fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::last_write_time(unrelated, fs::file_time_type::clock::now() - std::chrono::hours(2));

  ArtifactStore store(dir_.string(), 0);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));  // may be another writer's entry in progress
  EXPECT_TRUE(fs::exists(unrelated));
  EXPECT_TRUE(fs::exists(top));
  EXPECT_EQ(store.total_bytes(), 0u);
}

// Two daemons sharing a directory, each compiling on several threads: the
// same key is written by both at once and read while it is being replaced.
// A reader must get a whole payload someone stored, and a key stored before
// a Load started must never be a miss (a miss there means a reader saw a
// partial file and rejected, i.e. deleted, a good entry).
TEST_F(ArtifactStoreTest, TwoStoresOnOneDirectoryFromManyThreadsNeverTearAnEntry) {
  constexpr int kKeys = 6;
  constexpr int kVariants = 3;  // different payloads written under one key
  constexpr int kThreadsPerStore = 4;
  constexpr int kOps = 60;
  // Payloads of different lengths (tens of KiB, so a write takes a while),
  // each naming its key and variant so a mixed-up one cannot pass.
  std::vector<std::vector<std::string>> payloads(kKeys);
  std::vector<std::set<std::string>> allowed(kKeys);
  for (int k = 0; k < kKeys; ++k) {
    for (int v = 0; v < kVariants; ++v) {
      std::string p = "key " + std::to_string(k) + " variant " + std::to_string(v) + ":";
      p.append(20000 + 7919 * v + 131 * k, static_cast<char>('a' + (k * kVariants + v) % 26));
      payloads[k].push_back(p);
      allowed[k].insert(p);
    }
  }
  auto key_of = [](int k) { return std::string(64, static_cast<char>('a' + k)); };

  ArtifactStore first(dir_.string(), 0);
  ArtifactStore second(dir_.string(), 0);
  ASSERT_TRUE(first.enabled() && second.enabled());
  std::atomic<int> wrong{0}, lost{0}, loads{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2 * kThreadsPerStore; ++t) {
    threads.emplace_back([&, t] {
      ArtifactStore& store = t % 2 == 0 ? first : second;
      std::mt19937 rng(1234 + t);
      std::vector<bool> stored(kKeys, false);  // by this thread, earlier
      for (int i = 0; i < kOps; ++i) {
        // Half the threads stay on keys 0 and 1, so those are contended.
        const int k = t < kThreadsPerStore ? static_cast<int>(rng() % 2)
                                           : static_cast<int>(rng() % kKeys);
        if (rng() % 2 == 0) {
          store.Store(key_of(k), payloads[k][rng() % kVariants]);
          stored[k] = true;
          continue;
        }
        ++loads;
        auto got = store.Load(key_of(k));
        if (got.has_value()) {
          ++hits;
          if (!allowed[k].count(*got)) ++wrong;
        } else if (stored[k]) {
          ++lost;
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(wrong.load(), 0) << "loads returning a payload nobody stored under that key";
  EXPECT_EQ(lost.load(), 0) << "loads missing an entry stored before they began";
  EXPECT_GT(hits.load(), loads.load() / 2);  // the loads did read entries
  EXPECT_TRUE(first.enabled());
  EXPECT_TRUE(second.enabled());
  int entries = 0, others = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "artifacts")) {
    if (!e.is_regular_file()) continue;
    (e.path().extension() == ".kart" ? entries : others)++;
  }
  EXPECT_EQ(others, 0) << "temporaries left behind";
  // The seeds are fixed, and with them every key gets stored.
  EXPECT_EQ(entries, kKeys);
  ArtifactStore reopened(dir_.string(), 0);
  for (int k = 0; k < kKeys; ++k) {
    auto got = reopened.Load(key_of(k));
    ASSERT_TRUE(got.has_value()) << "key " << k;
    EXPECT_TRUE(allowed[k].count(*got)) << "key " << k;
  }
}

TEST_F(ArtifactStoreTest, EntriesThatAreNotRegularFilesAreMissesWithoutBlocking) {
  ArtifactStore store(dir_.string());
  store.Store(key_, payload_);
  const std::string path = store.PathFor(key_);
  // A FIFO would block an open for reading until a writer came (never); a
  // link to /dev/zero would be read until memory ran out.
  const std::function<void()> plants[] = {
      [&] { ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0); },
      [&] { fs::create_symlink("/dev/zero", path); },
      [&] { fs::create_symlink(dir_ / "elsewhere", path); },
  };
  WriteFile((dir_ / "elsewhere").string(), ReadFile(path));
  for (const auto& plant : plants) {
    fs::remove(path);
    plant();
    EXPECT_FALSE(store.Load(key_).has_value());
    EXPECT_FALSE(fs::exists(fs::symlink_status(path)));  // the link itself, not its target
  }
  EXPECT_TRUE(fs::exists(dir_ / "elsewhere"));
  EXPECT_TRUE(store.enabled());
}

TEST_F(ArtifactStoreTest, EntryLargerThanItsHeaderSaysIsRejectedUnread) {
  ArtifactStore store(dir_.string());
  store.Store(key_, payload_);
  const std::string path = store.PathFor(key_);
  // Sparse: costs no disk, but reading it whole would take 64 GiB.
  fs::resize_file(path, uint64_t{64} << 30);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(store.Load(key_).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(ArtifactStoreTest, DirectoryOthersCanWriteRefusesTheCache) {
  {
    ArtifactStore store(dir_.string());
    store.Store(key_, payload_);
  }
  const fs::path shard = fs::path(ArtifactStore(dir_.string()).PathFor(key_)).parent_path();
  for (const fs::path& d : {dir_, dir_ / "artifacts", shard}) {
    ::chmod(d.c_str(), 0777);
    ArtifactStore store(dir_.string());
    EXPECT_FALSE(store.enabled()) << d;
    EXPECT_FALSE(store.Load(key_).has_value()) << d;
    ::chmod(d.c_str(), 0755);
  }
  // Found later, on use: refused from then on.
  ArtifactStore store(dir_.string());
  ASSERT_TRUE(store.enabled());
  ::chmod(shard.c_str(), 0775);
  EXPECT_FALSE(store.Load(key_).has_value());
  EXPECT_FALSE(store.enabled());
  ::chmod(shard.c_str(), 0755);
  EXPECT_TRUE(fs::exists(store.PathFor(key_)));  // refused, not deleted
}

TEST_F(ArtifactStoreTest, DirectoryOfAnotherUserRefusesTheCache) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  fs::create_directories(dir_ / "artifacts");
  ASSERT_EQ(::chown((dir_ / "artifacts").c_str(), 65534, 0), 0);
  ArtifactStore store(dir_.string());
  EXPECT_FALSE(store.enabled());
}

TEST_F(ArtifactStoreTest, LinkInPlaceOfAShardRefusesTheCache) {
  fs::create_directories(dir_ / "elsewhere");
  fs::create_directories(dir_ / "artifacts");
  fs::create_directory_symlink(dir_ / "elsewhere", dir_ / "artifacts" / key_.substr(0, 2));
  ArtifactStore store(dir_.string());
  EXPECT_FALSE(store.enabled());
}

}  // namespace
}  // namespace kiln::cache
