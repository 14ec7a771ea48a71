// The test gate: a run held at it goes on only after the test's byte (or
// its closing the pipe), the test can tell a run is held without sleeping,
// and a gate that cannot be opened lets runs through.
#include "server/test_call_gate.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;

class TestCallGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-gate-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fifo_ = (dir_ / "gate").string();
    ASSERT_EQ(mkfifo(fifo_.c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The test's end of the pipe, opened once a run is held at the gate: a
  // non-blocking open for writing fails (ENXIO) until the gate has opened
  // its end, and the gate's open returns only then. Retries until then.
  int OpenOnceHeld() {
    while (true) {
      const int fd = open(fifo_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0 || errno != ENXIO) return fd;
      std::this_thread::yield();
    }
  }

  fs::path dir_;
  std::string fifo_;
};

TEST_F(TestCallGateTest, ARunGoesOnOnlyAfterTheTestsByte) {
  TestCallGate gate(fifo_);
  std::atomic<bool> passed{false};
  std::thread run([&] {
    gate.Pass();
    passed = true;
  });
  const int fd = OpenOnceHeld();
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // Held: the pipe is open at both ends and holds no byte, so Pass() is
  // blocked in read() and cannot have returned.
  EXPECT_FALSE(passed.load());
  ASSERT_EQ(write(fd, "g", 1), 1);
  run.join();
  EXPECT_TRUE(passed.load());
  close(fd);
}

TEST_F(TestCallGateTest, ClosingTheTestsEndLetsTheRunGo) {
  TestCallGate gate(fifo_);
  std::thread run([&] { gate.Pass(); });
  const int fd = OpenOnceHeld();
  ASSERT_GE(fd, 0);
  close(fd);  // a test that died: end of file, not a daemon stuck for good
  run.join();
}

TEST_F(TestCallGateTest, EachRunTakesOneByte) {
  TestCallGate gate(fifo_);
  for (int i = 0; i < 3; ++i) {
    std::thread run([&] { gate.Pass(); });
    const int fd = OpenOnceHeld();
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, "g", 1), 1);
    run.join();
    close(fd);
  }
}

TEST_F(TestCallGateTest, AGateThatCannotBeOpenedLetsRunsThrough) {
  TestCallGate gate((dir_ / "missing").string());
  gate.Pass();  // returns (and logs) instead of blocking
  EXPECT_EQ(gate.path(), (dir_ / "missing").string());
}

}  // namespace
}  // namespace kiln::server
