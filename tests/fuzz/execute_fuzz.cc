// libFuzzer target: Execute requests against a real KilnService behind a
// real (in-process) gRPC server, with a session that holds one registered
// shared-memory region and two compiled graphs. The fuzzer picks handles,
// regions, offsets, sizes and tensor metas; every request must end in a
// status (INVALID_ARGUMENT, NOT_FOUND, ...) or a run inside the region,
// never a crash or an access outside it (AddressSanitizer watches).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "google/protobuf/stubs/logging.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "server/kiln_service.h"
#include "server/process_watch.h"
#include "spdlog/spdlog.h"
#include "tests/testing/fuzz_access.h"
#include "tests/testing/proto_graph.h"

namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;

constexpr uint64_t kRegionBytes = 1 << 16;

struct Daemon {
  std::unique_ptr<kiln::server::KilnService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<kiln::v1::Kiln::Stub> stub;
  std::string session;

  Daemon() {
    spdlog::set_level(spdlog::level::off);
    service = std::make_unique<kiln::server::KilnService>("");
    service->SetAccess(nullptr, kiln::testing::kFuzzToken);
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    stub = kiln::v1::Kiln::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
    {
      grpc::ClientContext ctx;
      kiln::testing::Authorize(&ctx);
      kiln::v1::OpenSessionRequest req;
      req.set_pid(getpid());
      // No pid namespace: an in-process server knows no peer credentials,
      // and a client it cannot see may not claim the daemon's namespace.
      kiln::v1::OpenSessionResponse resp;
      if (!stub->OpenSession(&ctx, req, &resp).ok()) std::abort();
      session = resp.session_id();
    }
    const std::string name = "kiln-" + std::to_string(getpid()) + "-fuzz";
    int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, kRegionBytes) != 0) std::abort();
    close(fd);
    {
      grpc::ClientContext ctx;
      kiln::testing::Authorize(&ctx);
      kiln::v1::RegisterRegionRequest req;
      req.set_session_id(session);
      req.set_name(name);
      req.set_byte_size(kRegionBytes);
      kiln::v1::RegisterRegionResponse resp;
      if (!stub->RegisterRegion(&ctx, req, &resp).ok()) std::abort();  // region 1
    }
    shm_unlink(("/" + name).c_str());
    // Handle 1: relu of 16 floats; handle 2: x + y of 4x4 floats.
    GraphBuilder relu;
    relu.Output(relu.Call("aten.relu.default", {Ref(relu.Input({16}))}));
    GraphBuilder add;
    int x = add.Input({4, 4});
    int y = add.Input({4, 4});
    add.Output(add.Call("aten.add.Tensor", {Ref(x), Ref(y)}));
    for (auto* g : {&relu, &add}) {
      grpc::ClientContext ctx;
      kiln::testing::Authorize(&ctx);
      kiln::v1::CompileRequest req;
      req.set_session_id(session);
      *req.mutable_graph() = g->graph();
      kiln::v1::CompileResponse resp;
      if (!stub->Compile(&ctx, req, &resp).ok()) std::abort();
    }
  }
};

}  // namespace

// Invalid UTF-8 in string fields is a parse failure the fuzzer hits all
// the time; protobuf would log each one.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Daemon* daemon = new Daemon();
  kiln::v1::ExecuteRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  // Mostly this session's (to get past the lookup); "?" keeps the
  // fuzzer's own id, to try unknown sessions too.
  if (req.session_id() != "?") req.set_session_id(daemon->session);
  grpc::ClientContext ctx;
  kiln::testing::Authorize(&ctx);
  kiln::v1::ExecuteResponse resp;
  grpc::Status s = daemon->stub->Execute(&ctx, req, &resp);
  // A refusal must say why.
  if (!s.ok() && s.error_message().empty()) std::abort();
  return 0;
}
