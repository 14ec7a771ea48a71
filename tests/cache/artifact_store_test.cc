// The on-disk artifact store: round trip, and every kind of bad entry is a
// miss that removes the file, never a crash or a wrong payload.
#include "cache/artifact_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

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

  fs::path dir_;
  const std::string key_ = std::string(64, 'a');
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
  for (const auto& e : fs::recursive_directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_EQ(*store.Load(key_), "v9");
}

}  // namespace
}  // namespace kiln::cache
