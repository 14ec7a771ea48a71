// Hold calls against the real service (server/session_hold.h). The loss of
// an unwatchable client's connection needs a client in another pid
// namespace: tests/python/test_security.py starts one.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testing/service_fixture.h"

namespace kiln::testing {
namespace {

class SessionHoldTest : public ServiceFixture {
 protected:
  // Opens a Hold on `session` and waits for it to end; returns its status.
  grpc::Status HoldUntilEnded(const std::string& session, grpc::ClientContext* ctx) {
    kiln::v1::HoldRequest req;
    req.set_session_id(session);
    auto reader = stub_->Hold(ctx, req);
    kiln::v1::HoldResponse msg;
    while (reader->Read(&msg)) {
    }
    return reader->Finish();
  }
};

TEST_F(SessionHoldTest, AClientTheDaemonCanWatchIsNotAskedToHold) {
  EXPECT_FALSE(OpenSessionResponse().hold_required());
}

TEST_F(SessionHoldTest, HoldOnAnUnknownSessionIsNotFound) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(HoldUntilEnded("no-such-session", &ctx).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(SessionHoldTest, AWatchedSessionOutlivesItsHold) {
  grpc::ClientContext ctx;
  std::thread cancel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ctx.TryCancel();
  });
  EXPECT_EQ(HoldUntilEnded(session_, &ctx).error_code(), grpc::StatusCode::CANCELLED);
  cancel.join();
  // The process watch, not the hold, decides for a watched client: the
  // session is still open.
  kiln::v1::StatsResponse stats;
  grpc::ClientContext sctx;
  ASSERT_TRUE(stub_->GetStats(&sctx, kiln::v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.sessions(), 1u);
}

TEST_F(SessionHoldTest, ShutdownEndsOpenHoldsSoTheServerCanStop) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    service_->Shutdown();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(HoldUntilEnded(session_, &ctx).error_code(), grpc::StatusCode::UNAVAILABLE);
  stop.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace kiln::testing
