// The cache directory as untrusted input: entries that are not regular
// files of the daemon's user (links, FIFOs, devices, other owners, modes
// that let others write or the user not read) are refused without
// blocking; directories someone else can write are refused; reads stop at
// the size asked for.
#include "cache/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kiln::cache {
namespace {

namespace fs = std::filesystem;

// Any uid other than the test's own.
uid_t OtherUid() { return ::geteuid() == 65534 ? 65533 : 65534; }

class CacheDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-cache-dir-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd_, 0);
  }
  void TearDown() override {
    ::close(fd_);
    fs::remove_all(dir_);
  }
  void Write(const std::string& name, const std::string& data, mode_t mode = 0600) {
    std::ofstream(dir_ / name, std::ios::binary) << data;
    ::chmod((dir_ / name).c_str(), mode);
  }
  absl::StatusOr<CacheEntry> Open(const std::string& name) {
    return OpenCacheEntry(fd_, name, (dir_ / name).string());
  }

  fs::path dir_;
  int fd_ = -1;
};

TEST_F(CacheDirTest, RegularFileOfOursOpens) {
  Write("a", "hello");
  auto e = Open("a");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->st.st_size, 5);
  char buf[5];
  EXPECT_TRUE(ReadExactly(e->fd.get(), 0, buf, 5, "a").ok());
  EXPECT_EQ(std::string(buf, 5), "hello");
}

TEST_F(CacheDirTest, MissingEntryIsNotFound) {
  EXPECT_EQ(Open("none").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CacheDirTest, SymbolicLinkIsRefusedNotFollowed) {
  Write("target", "bytes");
  fs::create_symlink(dir_ / "target", dir_ / "link");
  fs::create_symlink("/dev/zero", dir_ / "zero");
  for (const char* name : {"link", "zero"}) {
    auto e = Open(name);
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_EQ(e.status().message(), "a symbolic link") << name;
  }
}

TEST_F(CacheDirTest, FifoIsRefusedWithoutWaitingForAWriter) {
  ASSERT_EQ(::mkfifo((dir_ / "fifo").c_str(), 0600), 0);
  // Blocking here (no writer ever comes) would hang the test.
  auto e = Open("fifo");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(e.status().message(), "a FIFO");
}

TEST_F(CacheDirTest, DirectoryInPlaceOfAnEntryIsRefused) {
  fs::create_directory(dir_ / "d");
  EXPECT_EQ(Open("d").status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(CacheDirTest, ModesThatLetOthersWriteOrTheUserNotReadAreRefused) {
  for (mode_t mode : {0000, 0200, 0620, 0602, 0666}) {
    Write("m", "x", mode);
    auto e = Open("m");
    EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss) << std::oct << mode;
  }
  for (mode_t mode : {0400, 0600, 0644}) {
    Write("m", "x", mode);
    EXPECT_TRUE(Open("m").ok()) << std::oct << mode;
  }
}

TEST_F(CacheDirTest, FileOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file away";
  Write("theirs", "x");
  ASSERT_EQ(::chown((dir_ / "theirs").c_str(), OtherUid(), 0), 0);
  auto e = Open("theirs");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(e.status().message().find("belongs to uid"), std::string::npos) << e.status();
}

TEST_F(CacheDirTest, ReadExactlyStopsAtTheSizeAskedAndFailsOnAShortFile) {
  Write("f", std::string(100, 'a'));
  auto e = Open("f");
  ASSERT_TRUE(e.ok());
  std::string buf(10, '\0');
  EXPECT_TRUE(ReadExactly(e->fd.get(), 90, buf.data(), 10, "f").ok());
  buf.resize(20);
  EXPECT_EQ(ReadExactly(e->fd.get(), 90, buf.data(), 20, "f").code(),
            absl::StatusCode::kDataLoss);
}

TEST_F(CacheDirTest, SubdirectoriesAreCreatedClosedToOthersAndChecked) {
  // A permissive umask must not make the cache's own directories unusable.
  const mode_t umask = ::umask(0);
  auto sub = OpenCacheSubdirectory(fd_, "s", (dir_ / "s").string(), /*create=*/true);
  ::umask(umask);
  ASSERT_TRUE(sub.ok()) << sub.status();
  struct stat st;
  ASSERT_EQ(::stat((dir_ / "s").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, kCacheDirectoryMode);

  EXPECT_EQ(OpenCacheSubdirectory(fd_, "none", "none", false).status().code(),
            absl::StatusCode::kNotFound);

  ::chmod((dir_ / "s").c_str(), 0775);
  auto writable = OpenCacheSubdirectory(fd_, "s", (dir_ / "s").string(), false);
  EXPECT_EQ(writable.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(writable.status().message().find("writable by its group or others (mode 0775)"),
            std::string::npos)
      << writable.status();

  fs::create_directory(dir_ / "real");
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  auto link = OpenCacheSubdirectory(fd_, "link", (dir_ / "link").string(), false);
  EXPECT_EQ(link.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(link.status().message().find("is a symbolic link"), std::string::npos);
}

TEST_F(CacheDirTest, DirectoryOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  fs::create_directory(dir_ / "theirs");
  ::chmod((dir_ / "theirs").c_str(), 0755);
  ASSERT_EQ(::chown((dir_ / "theirs").c_str(), OtherUid(), 0), 0);
  auto sub = OpenCacheSubdirectory(fd_, "theirs", (dir_ / "theirs").string(), false);
  EXPECT_EQ(sub.status().code(), absl::StatusCode::kPermissionDenied);
  auto root = OpenCacheRoot((dir_ / "theirs").string(), false);
  EXPECT_EQ(root.status().code(), absl::StatusCode::kPermissionDenied);
}

TEST_F(CacheDirTest, RootIsCreatedWithItsParentsAndMayBeReachedThroughALink) {
  auto root = OpenCacheRoot((dir_ / "a" / "b" / "cache").string(), /*create=*/true);
  ASSERT_TRUE(root.ok()) << root.status();
  fs::create_directory_symlink(dir_ / "a" / "b" / "cache", dir_ / "configured");
  EXPECT_TRUE(OpenCacheRoot((dir_ / "configured").string(), false).ok());
}

}  // namespace
}  // namespace kiln::cache
