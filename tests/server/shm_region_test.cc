// Shared-memory regions: names are confined to kiln-* objects in /dev/shm,
// and every descriptor is bounds-checked without overflow.
#include "server/shm_region.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <utime.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

std::string MakeObject(size_t size) {
  std::string name = "kiln-test-" + std::to_string(getpid()) + "-" + std::to_string(size);
  int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  close(fd);
  return name;
}

TEST(ShmRegion, RejectsNamesOutsideThePrefixOrWithPathCharacters) {
  for (const char* bad : {"", "kiln-", "other", "kiln-../etc/passwd", "kiln-a/b", "/kiln-a",
                          "kiln-a.b", "KILN-a"}) {
    EXPECT_FALSE(IsValidRegionName(bad)) << bad;
    EXPECT_EQ(ShmRegion::Open(bad, 64).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(IsValidRegionName("kiln-123_abc-XYZ"));
}

TEST(ShmRegion, MissingObjectSaysTheTwoMustShareDevShm) {
  // FAILED_PRECONDITION, not NOT_FOUND: a client reconnects on NOT_FOUND.
  absl::Status s = ShmRegion::Open("kiln-does-not-exist-42", 64).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("must share /dev/shm"), std::string::npos) << s;
}

TEST(ShmRegion, RejectsSizeLargerThanTheObject) {
  std::string name = MakeObject(4096);
  EXPECT_EQ(ShmRegion::Open(name, 8192).status().code(), absl::StatusCode::kInvalidArgument);
  shm_unlink(("/" + name).c_str());
}

TEST(ShmRegion, ResolveChecksBoundsWithoutOverflow) {
  std::string name = MakeObject(4096);
  auto region = ShmRegion::Open(name, 4096);
  shm_unlink(("/" + name).c_str());  // the mapping outlives the name
  ASSERT_TRUE(region.ok()) << region.status();
  EXPECT_TRUE((*region)->Resolve(0, 4096).ok());
  EXPECT_TRUE((*region)->Resolve(4000, 96).ok());
  EXPECT_FALSE((*region)->Resolve(4000, 97).ok());
  EXPECT_FALSE((*region)->Resolve(4097, 0).ok());
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  EXPECT_FALSE((*region)->Resolve(8, max).ok());
  EXPECT_FALSE((*region)->Resolve(max, 8).ok());
  EXPECT_EQ((*region)->Resolve(4000, 97).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RemoveStaleRegions, RemovesOnlyOldObjectsOfDeadProcesses) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln-stale-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  auto make = [&](const std::string& name, bool old) {
    std::ofstream(dir / name) << "x";
    if (old) {
      struct utimbuf t {1000, 1000};
      utime((dir / name).c_str(), &t);
    }
  };
  const std::string dead_old = "kiln-" + std::to_string(dead) + "-abc";
  const std::string dead_young = "kiln-" + std::to_string(dead) + "-young";
  const std::string live_old = "kiln-" + std::to_string(getpid()) + "-mine";
  make(dead_old, true);
  make(dead_young, false);
  make(live_old, true);
  make("kiln-notapid-x", true);
  make("other-" + std::to_string(dead) + "-x", true);
  EXPECT_EQ(RemoveStaleRegions(dir.string(), 10), 1);
  EXPECT_FALSE(fs::exists(dir / dead_old));
  EXPECT_TRUE(fs::exists(dir / dead_young));
  EXPECT_TRUE(fs::exists(dir / live_old));
  EXPECT_TRUE(fs::exists(dir / "kiln-notapid-x"));
  EXPECT_EQ(RemoveStaleRegions(dir.string(), 0), 1);  // the young one, now
  EXPECT_EQ(RemoveStaleRegions((dir / "missing").string(), 0), 0);
  fs::remove_all(dir);
}

TEST(ShmRegion, RejectsObjectsOpenToOtherUsers) {
  std::string name = MakeObject(4096);
  const std::string path = "/dev/shm/" + name;
  chmod(path.c_str(), 0660);
  auto region = ShmRegion::Open(name, 4096);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kPermissionDenied);
  chmod(path.c_str(), 0600);
  EXPECT_TRUE(ShmRegion::Open(name, 4096).ok());
  shm_unlink(("/" + name).c_str());
}

}  // namespace
}  // namespace kiln::server
