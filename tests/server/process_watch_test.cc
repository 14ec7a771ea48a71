#include "server/process_watch.h"

#include <sys/wait.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "server/session.h"

namespace kiln::server {
namespace {

TEST(ProcessWatchTest, OwnProcessHasAStartTimeAndNamespace) {
  EXPECT_NE(OwnPidNamespace(), 0u);
  auto a = ProcessStartTicks(getpid());
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(ProcessStartTicks(getpid()), a);
}

TEST(ProcessWatchTest, ExitedProcessHasNone) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_FALSE(ProcessStartTicks(child).has_value());
  EXPECT_FALSE(ProcessStartTicks(-1).has_value());
}

TEST(ProcessWatchTest, SessionOfAnExitedClientIsClosedOthersStay) {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  ASSERT_GT(child, 0);
  SessionRegistry sessions;
  auto dying = *sessions.Open(child, "child", child);
  auto self = *sessions.Open(getpid(), "self", getpid());
  // A client the daemon cannot see (another pid namespace): never watched.
  auto foreign = *sessions.Open(child, "elsewhere", std::nullopt);
  EXPECT_TRUE(sessions.CloseExited().empty());
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  auto closed = sessions.CloseExited();
  ASSERT_EQ(closed.size(), 1u);
  EXPECT_EQ(closed[0]->id(), dying->id());
  EXPECT_FALSE(sessions.Find(dying->id()).ok());
  EXPECT_TRUE(sessions.Find(self->id()).ok());
  EXPECT_TRUE(sessions.Find(foreign->id()).ok());
}

}  // namespace
}  // namespace kiln::server
