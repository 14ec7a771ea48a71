// A real KilnService behind a real gRPC server on a unix socket (accepted,
// credentials checked, by the daemon's PeerListener), one open session and
// one registered shared-memory region: the fixture of the server tests,
// which drive the service as a client process would.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "server/kiln_service.h"
#include "server/peer_listener.h"
#include "server/process_watch.h"
#include "tests/testing/proto_graph.h"

namespace kiln::testing {

namespace fs = std::filesystem;
using server::KilnService;

class ServiceFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln-svc-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    service_ = std::make_unique<KilnService>((dir_ / "cache").string());
    auto listener = server::PeerListener::Bind((dir_ / "s.sock").string());
    ASSERT_TRUE(listener.ok()) << listener.status();
    listener_ = *std::move(listener);
    service_->SetAccess(listener_.get(), "");
    grpc::ServerBuilder builder;
    target_ = "unix:" + (dir_ / "s.sock").string();
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    listener_->Start(server_.get());
    stub_ = kiln::v1::Kiln::NewStub(grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
    session_ = OpenSession();
    // One shared-memory region for this client.
    base_ = CreateRegion(kRegionBytes, session_, &region_id_);
  }
  void TearDown() override {
    listener_->Stop();
    server_->Shutdown();
    service_->Shutdown();
    for (auto [base, bytes] : mappings_) munmap(base, bytes);
    fs::remove_all(dir_);
  }

  // Creates, maps and registers a region of `bytes` in `session`, unlinked
  // once registered (as the client does); unmapped at TearDown.
  uint8_t* CreateRegion(uint64_t bytes, const std::string& session, uint64_t* region_id) {
    const std::string name =
        "kiln-" + std::to_string(getpid()) + "-svctest-" + std::to_string(mappings_.size());
    int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    auto* base = static_cast<uint8_t*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    mappings_.emplace_back(base, bytes);
    *region_id = Register(session, name, bytes);
    shm_unlink(("/" + name).c_str());
    return base;
  }

  std::string OpenSession() { return OpenSessionResponse().session_id(); }
  // As this process's client would open one: its pid, its pid namespace.
  kiln::v1::OpenSessionResponse OpenSessionResponse() {
    grpc::ClientContext ctx;
    kiln::v1::OpenSessionRequest req;
    req.set_pid(getpid());
    req.set_pid_namespace(server::OwnPidNamespace());
    kiln::v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub_->OpenSession(&ctx, req, &resp).ok());
    return resp;
  }
  // RegisterRegion's status, for tests of refusals; the id in *region_id.
  grpc::Status TryRegister(const std::string& session, const std::string& name, uint64_t bytes,
                           uint64_t* region_id = nullptr) {
    grpc::ClientContext ctx;
    kiln::v1::RegisterRegionRequest req;
    req.set_session_id(session);
    req.set_name(name);
    req.set_byte_size(bytes);
    kiln::v1::RegisterRegionResponse resp;
    grpc::Status s = stub_->RegisterRegion(&ctx, req, &resp);
    if (region_id != nullptr) *region_id = resp.region_id();
    return s;
  }
  uint64_t Register(const std::string& session, const std::string& name,
                    uint64_t bytes = kRegionBytes) {
    uint64_t id = 0;
    grpc::Status s = TryRegister(session, name, bytes, &id);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return id;
  }
  grpc::Status Compile(const kiln::v1::Graph& graph, kiln::v1::CompileResponse* resp,
                       const std::string& session = "",
                       const std::map<std::string, std::string>& options = {}) {
    grpc::ClientContext ctx;
    kiln::v1::CompileRequest req;
    req.set_session_id(session.empty() ? session_ : session);
    *req.mutable_graph() = graph;
    for (const auto& [k, v] : options) (*req.mutable_options())[k] = v;
    req.set_model_caching(true);
    return stub_->Compile(&ctx, req, resp);
  }
  kiln::v1::TensorDescriptor Desc(uint64_t offset, const std::vector<int64_t>& shape) {
    kiln::v1::TensorDescriptor d;
    d.set_region_id(region_id_);
    d.set_offset(offset);
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    d.set_byte_size(n * 4);
    *d.mutable_meta() = F32Meta(shape);
    return d;
  }
  grpc::Status Execute(uint64_t handle, const kiln::v1::TensorDescriptor& in,
                       const kiln::v1::TensorDescriptor& out, const std::string& session = "") {
    grpc::ClientContext ctx;
    kiln::v1::ExecuteRequest req;
    req.set_session_id(session.empty() ? session_ : session);
    req.set_handle(handle);
    *req.add_inputs() = in;
    *req.add_outputs() = out;
    kiln::v1::ExecuteResponse resp;
    return stub_->Execute(&ctx, req, &resp);
  }
  uint64_t CompileRelu(int n, const std::map<std::string, std::string>& options = {}) {
    GraphBuilder b;
    int x = b.Input({n});
    b.Output(b.Call("aten.relu.default", {Ref(x)}));
    kiln::v1::CompileResponse resp;
    grpc::Status s = Compile(b.graph(), &resp, "", options);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.handle();
  }
  void ExpectReluWorks(uint64_t handle) {
    float* in = reinterpret_cast<float*>(base_);
    float* out = reinterpret_cast<float*>(base_ + 4096);
    for (int i = 0; i < 16; ++i) in[i] = static_cast<float>(i - 8);
    grpc::Status s = Execute(handle, Desc(0, {16}), Desc(4096, {16}));
    ASSERT_TRUE(s.ok()) << s.error_message();
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], std::max(0.f, in[i]));
  }

  static constexpr int64_t kRegionBytes = 1 << 16;
  fs::path dir_;
  std::string target_;
  std::unique_ptr<KilnService> service_;
  std::unique_ptr<server::PeerListener> listener_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<kiln::v1::Kiln::Stub> stub_;
  std::string session_;
  uint64_t region_id_ = 0;
  uint8_t* base_ = nullptr;
  std::vector<std::pair<uint8_t*, uint64_t>> mappings_;
};

}  // namespace kiln::testing
