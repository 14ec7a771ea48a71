// The SIGBUS guard: a client object truncated under a region breaks that
// region (zeros read, writes lost, Check() says so) instead of killing the
// process; a fault anywhere else still kills it.
#include "server/client_memory_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "server/shm_region.h"

namespace kiln::server {
namespace {

struct Object {
  std::string name;
  int fd = -1;
  explicit Object(size_t size) {
    static int count = 0;
    name = "kiln-guard-" + std::to_string(getpid()) + "-" + std::to_string(++count);
    fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
  }
  ~Object() {
    close(fd);
    shm_unlink(("/" + name).c_str());
  }
};

TEST(ClientMemoryGuard, TruncatedObjectBreaksItsRegionInsteadOfTheProcess) {
  Object object(1 << 16);
  auto region = ShmRegion::Open(object.name, 1 << 16);
  ASSERT_TRUE(region.ok()) << region.status();
  auto* bytes = *(*region)->Resolve(0, 1 << 16);
  std::memset(bytes, 7, 1 << 16);
  EXPECT_TRUE((*region)->Check().ok());
  ASSERT_EQ(ftruncate(object.fd, 4096), 0);
  // Past the new end: faults, and reads zeros from then on (the page
  // before it too: the whole mapping is replaced).
  volatile uint8_t* far = bytes + 32768;
  EXPECT_EQ(*far, 0);
  EXPECT_EQ(bytes[0], 0);
  bytes[40000] = 1;  // written nowhere the client sees
  EXPECT_TRUE((*region)->broken());
  absl::Status s = (*region)->Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("shrank"), std::string::npos) << s;
  EXPECT_EQ((*region)->Resolve(0, 64).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ClientMemoryGuard, OtherRegionsAreUntouched) {
  Object shrinking(1 << 16), steady(1 << 16);
  auto a = ShmRegion::Open(shrinking.name, 1 << 16);
  auto b = ShmRegion::Open(steady.name, 1 << 16);
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* kept = *(*b)->Resolve(0, 64);
  kept[0] = 42;
  ASSERT_EQ(ftruncate(shrinking.fd, 0), 0);
  volatile uint8_t* gone = *(*a)->Resolve(0, 64);
  EXPECT_EQ(*gone, 0);
  EXPECT_TRUE((*a)->broken());
  EXPECT_FALSE((*b)->broken());
  EXPECT_EQ(kept[0], 42);
  uint8_t seen = 0;
  ASSERT_EQ(pread(steady.fd, &seen, 1, 0), 1);
  EXPECT_EQ(seen, 42);  // still the client's object
}

TEST(ClientMemoryGuardDeathTest, AFaultOutsideClientMemoryStillKills) {
  InstallClientMemoryGuard();
  EXPECT_EXIT(
      {
        Object object(1 << 16);
        // The child dies before any destructor runs: no name left behind.
        shm_unlink(("/" + object.name).c_str());
        auto* p = static_cast<volatile uint8_t*>(
            mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, object.fd, 0));
        if (ftruncate(object.fd, 0) != 0) _exit(3);
        (void)p[100];
        _exit(0);
      },
      // SIGBUS; under a sanitizer, its report and then SIGABRT.
      [](int status) {
        return WIFSIGNALED(status) &&
               (WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT);
      },
      "");
}

}  // namespace
}  // namespace kiln::server
