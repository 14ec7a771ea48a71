// The cache directory's key: created once (0600) and then the same for
// every reader, the one published first when several daemons create it at
// once; a key file others may read, that is not a key, or that is a link,
// is refused.
#include "cache/cache_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/cache_dir.h"
#include "gtest/gtest.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;

class CacheKeyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-cache-key-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    fs::remove_all(dir_);
  }
  absl::StatusOr<CacheKey> Load() {
    return LoadOrCreateCacheKey(fd_, kCacheKeyFile, (dir_ / kCacheKeyFile).string());
  }

  fs::path dir_;
  int fd_ = -1;
};

TEST_F(CacheKeyTest, CreatedOnceClosedToOthersThenReadBack) {
  auto first = Load();
  ASSERT_TRUE(first.ok()) << first.status();
  struct stat st;
  ASSERT_EQ(::stat((dir_ / kCacheKeyFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600);
  EXPECT_EQ(st.st_size, 65);
  auto again = Load();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*first, *again);
  // No temporaries left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(CacheKeyTest, DaemonsCreatingAtOnceAllGetThePublishedKey) {
  constexpr int kThreads = 8;
  std::vector<absl::StatusOr<CacheKey>> keys(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { keys[i] = Load(); });
  for (auto& t : threads) t.join();
  std::set<CacheKey> distinct;
  for (const auto& k : keys) {
    ASSERT_TRUE(k.ok()) << k.status();
    distinct.insert(*k);
  }
  EXPECT_EQ(distinct.size(), 1u);
}

TEST_F(CacheKeyTest, KeyFileOthersMayReadIsRefused) {
  ASSERT_TRUE(Load().ok());
  ::chmod((dir_ / kCacheKeyFile).c_str(), 0640);
  auto k = Load();
  EXPECT_EQ(k.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(k.status().message().find("may be read by others (mode 0640"), std::string::npos)
      << k.status();
}

TEST_F(CacheKeyTest, FileThatIsNotAKeyIsRefused) {
  for (const std::string& text :
       {std::string("short\n"), std::string(64, 'g') + "\n", std::string(64, 'a') + "x"}) {
    fs::remove(dir_ / kCacheKeyFile);
    std::ofstream(dir_ / kCacheKeyFile) << text;
    ::chmod((dir_ / kCacheKeyFile).c_str(), 0600);
    EXPECT_EQ(Load().status().code(), absl::StatusCode::kDataLoss) << text;
  }
}

TEST_F(CacheKeyTest, LinkInPlaceOfTheKeyIsRefused) {
  std::ofstream(dir_ / "elsewhere") << std::string(64, 'a') << "\n";
  ::chmod((dir_ / "elsewhere").c_str(), 0600);
  fs::create_symlink(dir_ / "elsewhere", dir_ / kCacheKeyFile);
  EXPECT_EQ(Load().status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace kiln::cache
