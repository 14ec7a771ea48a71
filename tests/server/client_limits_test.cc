// Per-client caps: past each one the request gets RESOURCE_EXHAUSTED with
// the numbers, nothing the client holds changes, and other clients go on.
#include "server/client_limits.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"
#include "runtime/util/sha256.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

using ClientLimitsTest = kiln::testing::ServiceFixture;
using kiln::testing::GraphBuilder;

// A /dev/shm object of `bytes` named `name`, with `mode`; removed by the
// caller.
void CreateObject(const std::string& name, uint64_t bytes, mode_t mode) {
  int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
  ASSERT_GE(fd, 0);
  fchmod(fd, mode);  // whatever the umask left
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
  close(fd);
}

TEST_F(ClientLimitsTest, HandlesPastTheCapAreRefusedUntilOneIsReleased) {
  ClientLimits limits;
  limits.max_handles = 2;
  service_->SetClientLimits(limits);
  session_ = OpenSession();
  const uint64_t a = CompileRelu(16);
  CompileRelu(32);
  GraphBuilder b;
  int x = b.Input({64});
  b.Output(b.Call("aten.relu.default", {kiln::testing::Ref(x)}));
  kiln::v1::CompileResponse resp;
  grpc::Status s = Compile(b.graph(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-client-handles"), std::string::npos) << s.error_message();
  // Another client is not held to this one's count.
  const std::string mine = session_;
  session_ = OpenSession();
  EXPECT_NE(CompileRelu(64), 0u);
  session_ = mine;
  grpc::ClientContext ctx;
  kiln::v1::ReleaseRequest release;
  release.set_session_id(session_);
  release.set_handle(a);
  kiln::v1::ReleaseResponse released;
  ASSERT_TRUE(stub_->Release(&ctx, release, &released).ok());
  EXPECT_TRUE(Compile(b.graph(), &resp).ok());
}

TEST_F(ClientLimitsTest, SharedMemoryPastTheCapIsRefusedAndUnregisteringFreesIt) {
  ClientLimits limits;
  limits.max_region_bytes = 3 * kRegionBytes / 2;
  service_->SetClientLimits(limits);
  session_ = OpenSession();
  uint64_t first = 0;
  CreateRegion(kRegionBytes, session_, &first);
  const std::string name = "kiln-" + std::to_string(getpid()) + "-captest";
  CreateObject(name, kRegionBytes, 0600);
  grpc::Status s = TryRegister(session_, name, kRegionBytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-client-shm-mb"), std::string::npos) << s.error_message();
  grpc::ClientContext ctx;
  kiln::v1::UnregisterRegionRequest req;
  req.set_session_id(session_);
  req.set_region_id(first);
  kiln::v1::UnregisterRegionResponse resp;
  ASSERT_TRUE(stub_->UnregisterRegion(&ctx, req, &resp).ok());
  EXPECT_TRUE(TryRegister(session_, name, kRegionBytes).ok());
  shm_unlink(("/" + name).c_str());
}

TEST_F(ClientLimitsTest, ConstantBytesPastTheCapAreNotStored) {
  ClientLimits limits;
  limits.max_constant_bytes = 24;  // one 16-byte constant fits, two do not
  service_->SetClientLimits(limits);
  session_ = OpenSession();
  uint64_t region = 0;
  uint8_t* base = CreateRegion(kRegionBytes, session_, &region);
  auto upload = [&](std::vector<float> w) {
    std::memcpy(base, w.data(), 16);
    grpc::ClientContext ctx;
    kiln::v1::UploadConstantsRequest req;
    req.set_session_id(session_);
    auto* c = req.add_constants();
    c->set_hash(runtime::Sha256Hex(w.data(), 16));
    *c->mutable_data() = Desc(0, {4});
    c->mutable_data()->set_region_id(region);
    kiln::v1::UploadConstantsResponse resp;
    return stub_->UploadConstants(&ctx, req, &resp);
  };
  ASSERT_TRUE(upload({1, 2, 3, 4}).ok());
  // Already in the store: costs nothing.
  ASSERT_TRUE(upload({1, 2, 3, 4}).ok());
  grpc::Status s = upload({5, 6, 7, 8});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-client-constant-mb"), std::string::npos);
  kiln::v1::StatsResponse stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStats(&ctx, kiln::v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(stats.constants(), 1u);
}

TEST_F(ClientLimitsTest, RegionsOfAnotherProcessOrOpenToOthersAreRefused) {
  const std::string other = "kiln-" + std::to_string(getpid() + 1) + "-notmine";
  CreateObject(other, 4096, 0600);
  grpc::Status s = TryRegister(session_, other, 4096);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not this client's"), std::string::npos) << s.error_message();
  shm_unlink(("/" + other).c_str());

  const std::string open_to_all = "kiln-" + std::to_string(getpid()) + "-world";
  CreateObject(open_to_all, 4096, 0644);
  s = TryRegister(session_, open_to_all, 4096);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find("0644"), std::string::npos) << s.error_message();
  shm_unlink(("/" + open_to_all).c_str());
  ExpectReluWorks(CompileRelu(16));
}

}  // namespace
}  // namespace kiln::server
