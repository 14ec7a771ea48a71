// The socket's directory: created 0700 when missing, refused (never
// changed) when it is open to other users or not ours.
#include "server/socket_lock.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

class SocketLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("kiln-lock-" + std::to_string(getpid()));
    fs::remove_all(base_);
    fs::create_directories(base_);
    chmod(base_.c_str(), 0700);
  }
  void TearDown() override { fs::remove_all(base_); }
  mode_t ModeOf(const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(stat(p.c_str(), &st), 0);
    return st.st_mode & 07777;
  }
  fs::path base_;
};

TEST_F(SocketLockTest, AMissingDirectoryIsCreatedClosedToOthers) {
  const fs::path dir = base_ / "sock";
  auto lock = SocketLock::Acquire((dir / "kilnd.sock").string());
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_EQ(ModeOf(dir), 0700u);
}

TEST_F(SocketLockTest, ADirectoryOthersMayUseIsRefusedAndLeftAsItIs) {
  // As /tmp is: ours (for a root daemon), open to everyone, sticky.
  const fs::path dir = base_ / "shared";
  fs::create_directories(dir);
  chmod(dir.c_str(), 01777);
  auto lock = SocketLock::Acquire((dir / "kilnd.sock").string());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(lock.status().message().find("open to other users (mode 1777)"), std::string::npos)
      << lock.status();
  EXPECT_EQ(ModeOf(dir), 01777u);
}

TEST_F(SocketLockTest, ADirectoryOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory away";
  const fs::path dir = base_ / "theirs";
  fs::create_directories(dir);
  chmod(dir.c_str(), 0700);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  auto lock = SocketLock::Acquire((dir / "kilnd.sock").string());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(lock.status().message().find("belongs to uid 65534"), std::string::npos)
      << lock.status();
}

}  // namespace
}  // namespace kiln::server
