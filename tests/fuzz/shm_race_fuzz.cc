// libFuzzer target: a hostile client that changes and shrinks its shared
// memory while the daemon uses it.
//
// A real KilnService behind an in-process gRPC server. The hostile session
// holds two data regions, a call channel and three graphs (relu, an
// embedding whose indices live in client memory, and an add). Each input is
// a short program of requests (Execute, channel calls, constant uploads)
// and attacks (flip bytes, truncate a region, grow it back, unregister and
// register it again, let a background thread scribble on or truncate the
// regions while requests run). A bystander session with memory nobody
// touches runs relu between programs and must get the exact answer.
//
// Oracle: no crash, nothing AddressSanitizer reports (a read outside the
// embedding table, a use of an unmapped region), every refusal with a
// message, and the bystander's answers right. The fuzzer itself touches
// the data regions only through their file descriptors (pread/pwrite,
// ftruncate), never through a mapping, so a truncation cannot fault here:
// only the daemon's accesses can, and those are what is tested.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>
#include <grpcpp/grpcpp.h>

#include "google/protobuf/stubs/logging.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "runtime/util/sha256.h"
#include "server/call_channel_layout.h"
#include "server/futex.h"
#include "server/kiln_service.h"
#include "server/process_watch.h"
#include "spdlog/spdlog.h"
#include "tests/testing/fuzz_access.h"
#include "tests/testing/proto_graph.h"

namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;
namespace ks = kiln::server;

constexpr uint64_t kDataBytes = 1 << 16;
constexpr int kRows = 16, kDim = 4, kIndices = 64;

void Check(bool ok) {
  if (!ok) std::abort();
}

kiln::v1::TensorMeta Meta(kiln::v1::DType dtype, const std::vector<int64_t>& shape) {
  kiln::v1::TensorMeta m = kiln::testing::F32Meta(shape);
  m.set_dtype(dtype);
  return m;
}

// A /dev/shm object of ours, registered in a session (again when asked).
struct Object {
  std::string name;
  int fd = -1;
  uint64_t region_id = 0;
};

class Client {
 public:
  Client(kiln::v1::Kiln::Stub* stub, const std::string& tag) : stub_(stub) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::OpenSessionRequest req;
    req.set_pid(getpid());
    // No pid namespace: an in-process server knows no peer credentials,
    // and a client it cannot see may not claim the daemon's namespace.
    req.set_client_name(tag);
    kiln::v1::OpenSessionResponse resp;
    Check(stub_->OpenSession(&ctx, req, &resp).ok());
    session_ = resp.session_id();
  }

  const std::string& session() const { return session_; }

  Object NewObject(const std::string& tag, uint64_t bytes) {
    Object o;
    o.name = "kiln-" + std::to_string(getpid()) + "-race" + tag;
    o.fd = shm_open(("/" + o.name).c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    Check(o.fd >= 0 && ftruncate(o.fd, static_cast<off_t>(bytes)) == 0);
    Check(Register(&o, bytes).ok());
    return o;
  }

  grpc::Status Register(Object* o, uint64_t bytes) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::RegisterRegionRequest req;
    req.set_session_id(session_);
    req.set_name(o->name);
    req.set_byte_size(bytes);
    kiln::v1::RegisterRegionResponse resp;
    grpc::Status s = stub_->RegisterRegion(&ctx, req, &resp);
    if (s.ok()) o->region_id = resp.region_id();
    return s;
  }

  grpc::Status Unregister(const Object& o) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::UnregisterRegionRequest req;
    req.set_session_id(session_);
    req.set_region_id(o.region_id);
    kiln::v1::UnregisterRegionResponse resp;
    return stub_->UnregisterRegion(&ctx, req, &resp);
  }

  uint64_t Compile(const kiln::v1::Graph& graph) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::CompileRequest req;
    req.set_session_id(session_);
    *req.mutable_graph() = graph;
    kiln::v1::CompileResponse resp;
    Check(stub_->Compile(&ctx, req, &resp).ok());
    return resp.handle();
  }

  grpc::Status Execute(uint64_t handle, const std::vector<kiln::v1::TensorDescriptor>& in,
                       const std::vector<kiln::v1::TensorDescriptor>& out) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::ExecuteRequest req;
    req.set_session_id(session_);
    req.set_handle(handle);
    for (const auto& d : in) *req.add_inputs() = d;
    for (const auto& d : out) *req.add_outputs() = d;
    kiln::v1::ExecuteResponse resp;
    return stub_->Execute(&ctx, req, &resp);
  }

  grpc::Status Upload(const std::string& hash, const kiln::v1::TensorDescriptor& data) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::UploadConstantsRequest req;
    req.set_session_id(session_);
    auto* c = req.add_constants();
    c->set_hash(hash);
    *c->mutable_data() = data;
    kiln::v1::UploadConstantsResponse resp;
    return stub_->UploadConstants(&ctx, req, &resp);
  }

  grpc::Status OpenChannel(uint64_t region_id) {
    grpc::ClientContext ctx;
    kiln::testing::Authorize(&ctx);
    kiln::v1::OpenChannelRequest req;
    req.set_session_id(session_);
    req.set_region_id(region_id);
    kiln::v1::OpenChannelResponse resp;
    return stub_->OpenChannel(&ctx, req, &resp);
  }

 private:
  kiln::v1::Kiln::Stub* stub_;
  std::string session_;
};

kiln::v1::TensorDescriptor Desc(const Object& o, uint64_t offset, const kiln::v1::TensorMeta& m,
                                uint64_t bytes) {
  kiln::v1::TensorDescriptor d;
  d.set_region_id(o.region_id);
  d.set_offset(offset);
  d.set_byte_size(bytes);
  *d.mutable_meta() = m;
  return d;
}

// Scribbles on, or truncates and restores, the data objects while requests
// run, as the program says (mode 0: idle).
class Saboteur {
 public:
  explicit Saboteur(std::vector<int> fds) : fds_(std::move(fds)) {
    thread_ = std::thread([this] { Loop(); });
  }
  void SetMode(int mode) { mode_.store(mode); }

 private:
  void Loop() {
    std::minstd_rand rng(7);
    uint8_t junk[64];
    for (;;) {
      const int mode = mode_.load();
      if (mode == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const int fd = fds_[rng() % fds_.size()];
      if (mode == 1) {  // bytes change under the daemon
        for (auto& b : junk) b = static_cast<uint8_t>(rng());
        (void)!pwrite(fd, junk, sizeof junk, static_cast<off_t>(rng() % (kDataBytes - 64)));
      } else {  // the object shrinks, then comes back
        (void)!ftruncate(fd, static_cast<off_t>(rng() % kDataBytes));
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
        (void)!ftruncate(fd, kDataBytes);
      }
    }
  }

  std::vector<int> fds_;
  std::atomic<int> mode_{0};
  std::thread thread_;  // runs for the process's life
};

struct Harness {
  std::unique_ptr<ks::KilnService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<kiln::v1::Kiln::Stub> stub;
  std::unique_ptr<Client> hostile, bystander;
  Object data[2], block, clean;
  uint8_t* block_base = nullptr;
  uint64_t relu = 0, embedding = 0, add = 0, bystander_relu = 0;
  uint64_t seq = 0;
  std::unique_ptr<Saboteur> saboteur;

  Harness() {
    spdlog::set_level(spdlog::level::off);
    service = std::make_unique<ks::KilnService>("");
    service->SetAccess(nullptr, kiln::testing::kFuzzToken);
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    stub = kiln::v1::Kiln::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
    hostile = std::make_unique<Client>(stub.get(), "hostile");
    bystander = std::make_unique<Client>(stub.get(), "bystander");
    data[0] = hostile->NewObject("a", kDataBytes);
    data[1] = hostile->NewObject("b", kDataBytes);
    clean = bystander->NewObject("clean", kDataBytes);
    // The channel block: mapped here too (the futex handshake needs it),
    // and never truncated.
    block = hostile->NewObject("block", ks::kMinChannelBytes);
    block_base = static_cast<uint8_t*>(mmap(nullptr, ks::kMinChannelBytes,
                                            PROT_READ | PROT_WRITE, MAP_SHARED, block.fd, 0));
    Check(block_base != MAP_FAILED);
    ks::WriteField<uint32_t>(block_base, ks::kChannelMagicOffset, ks::kChannelMagic);
    ks::WriteField<uint32_t>(block_base, ks::kChannelVersionOffset, ks::kChannelLayoutVersion);
    Check(hostile->OpenChannel(block.region_id).ok());

    GraphBuilder r;
    r.Output(r.Call("aten.relu.default", {Ref(r.Input({16}))}));
    relu = hostile->Compile(r.graph());
    bystander_relu = bystander->Compile(r.graph());
    GraphBuilder e;
    const int table = e.Input({kRows, kDim});
    auto* idx = e.graph().add_nodes();
    idx->set_name("indices");
    *idx->mutable_placeholder()->mutable_meta() = Meta(kiln::v1::INT64, {kIndices});
    e.Output(e.Call("aten.embedding.default", {Ref(table), Ref(e.graph().nodes_size() - 1)}));
    embedding = hostile->Compile(e.graph());
    GraphBuilder a;
    const int x = a.Input({4, 4});
    const int y = a.Input({4, 4});
    a.Output(a.Call("aten.add.Tensor", {Ref(x), Ref(y)}));
    add = hostile->Compile(a.graph());
    saboteur = std::make_unique<Saboteur>(std::vector<int>{data[0].fd, data[1].fd});
  }

  // A channel call of `handle` with these slots; the daemon's answer (or
  // UNAVAILABLE when it does not come).
  grpc::Status ChannelCall(uint64_t handle, const std::vector<ks::TensorSlot>& in,
                           const std::vector<ks::TensorSlot>& out) {
    uint32_t* state = reinterpret_cast<uint32_t*>(block_base + ks::kChannelStateOffset);
    if (ks::LoadAcquire(state) != ks::kChannelIdle) return grpc::Status(grpc::UNAVAILABLE, "busy");
    ks::WriteField<uint64_t>(block_base, ks::kRequestSeqOffset, ++seq);
    ks::WriteField<uint64_t>(block_base, ks::kRequestHandleOffset, handle);
    ks::WriteField<uint32_t>(block_base, ks::kRequestInputsOffset, in.size());
    ks::WriteField<uint32_t>(block_base, ks::kRequestOutputsOffset, out.size());
    uint64_t at = ks::kSlotsOffset;
    for (const auto* slots : {&in, &out}) {
      for (const ks::TensorSlot& s : *slots) {
        ks::WriteField<uint64_t>(block_base, at, s.region_id);
        ks::WriteField<uint64_t>(block_base, at + 8, s.offset);
        ks::WriteField<uint64_t>(block_base, at + 16, s.byte_size);
        at += ks::kSlotBytes;
      }
    }
    ks::StoreRelease(state, ks::kChannelRequest);
    ks::FutexWakeAll(state);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (ks::LoadAcquire(state) != ks::kChannelReply) {
      if (std::chrono::steady_clock::now() > deadline) std::abort();  // a lost call
      ks::FutexWait(state, ks::LoadAcquire(state), std::chrono::milliseconds(10));
    }
    const int32_t code = ks::ReadField<int32_t>(block_base, ks::kReplyCodeOffset);
    const uint32_t n = ks::ReadField<uint32_t>(block_base, ks::kReplyMessageBytesOffset);
    Check(code == 0 || n > 0);  // a refusal says why
    ks::StoreRelease(state, ks::kChannelIdle);
    return code == 0 ? grpc::Status::OK
                     : grpc::Status(static_cast<grpc::StatusCode>(code), "channel call failed");
  }

  void BystanderStillServed() {
    float x[16], want[16], got[16];
    for (int i = 0; i < 16; ++i) {
      x[i] = static_cast<float>(i) - 7.5f;
      want[i] = x[i] > 0 ? x[i] : 0;
    }
    Check(pwrite(clean.fd, x, sizeof x, 0) == sizeof x);
    const auto m = kiln::testing::F32Meta({16});
    Check(bystander->Execute(bystander_relu, {Desc(clean, 0, m, 64)}, {Desc(clean, 4096, m, 64)})
              .ok());
    Check(pread(clean.fd, got, sizeof got, 4096) == sizeof got);
    Check(std::memcmp(got, want, sizeof want) == 0);
  }
};

void Expect(const grpc::Status& s) {
  // Any outcome but silence: a refusal names its reason.
  if (!s.ok() && s.error_message().empty()) {
    std::fprintf(stderr, "status %d without a message\n", static_cast<int>(s.error_code()));
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static Harness* h = new Harness();
  FuzzedDataProvider in(bytes, size);
  const auto f16 = kiln::testing::F32Meta({16});
  const auto f44 = kiln::testing::F32Meta({4, 4});
  const auto table = kiln::testing::F32Meta({kRows, kDim});
  const auto idx = Meta(kiln::v1::INT64, {kIndices});
  const auto out_meta = kiln::testing::F32Meta({kIndices, kDim});
  for (int step = 0; step < 16 && in.remaining_bytes() > 0; ++step) {
    Object& o = h->data[in.ConsumeIntegral<uint8_t>() & 1];
    Object& other = h->data[in.ConsumeIntegral<uint8_t>() & 1];
    // Mostly aligned offsets well inside, sometimes anything.
    auto offset = [&] {
      return in.ConsumeBool() ? in.ConsumeIntegralInRange<uint64_t>(0, kDataBytes / 64 - 1) * 64
                              : in.ConsumeIntegral<uint64_t>();
    };
    switch (in.ConsumeIntegralInRange<int>(0, 9)) {
      case 0:
        Expect(h->hostile->Execute(h->relu, {Desc(o, offset(), f16, 64)},
                                   {Desc(other, offset(), f16, 64)}));
        break;
      case 1: {  // indices written now, maybe far out of range
        std::vector<int64_t> v(kIndices);
        for (auto& i : v) i = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(0, kRows - 1)
                                               : in.ConsumeIntegral<int64_t>();
        const uint64_t at = 8192;
        (void)!pwrite(o.fd, v.data(), v.size() * 8, at);
        Expect(h->hostile->Execute(h->embedding, {Desc(o, 0, table, kRows * kDim * 4),
                                                  Desc(o, at, idx, kIndices * 8)},
                                   {Desc(other, 16384 + offset() % 16384, out_meta,
                                         kIndices * kDim * 4)}));
        break;
      }
      case 2:
        Expect(h->hostile->Execute(h->add, {Desc(o, offset(), f44, 64), Desc(o, offset(), f44, 64)},
                                   {Desc(other, offset(), f44, 64)}));
        break;
      case 3: {  // an upload of bytes that may change while hashed
        const uint64_t n = in.ConsumeIntegralInRange<uint64_t>(1, 1024) * 4;
        const uint64_t at = offset() % (kDataBytes - n);
        std::vector<uint8_t> now(n);
        const bool readable = pread(o.fd, now.data(), n, static_cast<off_t>(at)) ==
                              static_cast<ssize_t>(n);
        // The right hash of the bytes as they are now, or another one
        // (hex either way: a string field must be UTF-8 to reach the daemon).
        const std::string other = in.ConsumeBytesAsString(8);
        const std::string hash = readable && in.ConsumeBool()
                                     ? kiln::runtime::Sha256Hex(now.data(), n)
                                     : kiln::runtime::Sha256Hex(other.data(), other.size());
        Expect(h->hostile->Upload(
            hash, Desc(o, at, kiln::testing::F32Meta({static_cast<int64_t>(n / 4)}), n)));
        break;
      }
      case 4:
        Expect(h->ChannelCall(h->relu, {{o.region_id, offset(), 64}},
                              {{other.region_id, offset(), 64}}));
        break;
      case 5:
        (void)!ftruncate(o.fd, static_cast<off_t>(in.ConsumeIntegralInRange<uint64_t>(
                                   0, kDataBytes)));
        break;
      case 6:
        (void)!ftruncate(o.fd, kDataBytes);
        break;
      case 7:  // a fresh mapping of the object (the old one may be broken)
        Expect(h->hostile->Unregister(o));
        (void)!ftruncate(o.fd, kDataBytes);
        Expect(h->hostile->Register(&o, kDataBytes));
        break;
      case 8:
        h->saboteur->SetMode(in.ConsumeIntegralInRange<int>(0, 2));
        break;
      case 9: {
        std::string junk = in.ConsumeBytesAsString(in.ConsumeIntegralInRange<size_t>(1, 256));
        (void)!pwrite(o.fd, junk.data(), junk.size(),
                      static_cast<off_t>(offset() % (kDataBytes - junk.size())));
        break;
      }
    }
  }
  h->saboteur->SetMode(0);
  h->BystanderStillServed();
  return 0;
}
