// Call channels through the real service: a block in real shared memory, the
// futex handshake a client process performs, and the same checks as the
// Execute RPC. Hostile blocks get error replies and the daemon keeps serving.
#include "server/call_channel.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "server/call_channel_layout.h"
#include "server/futex.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Ref;
using kiln::testing::ServiceFixture;

constexpr uint64_t kBlockBytes = 1 << 16;

class CallChannelTest : public ServiceFixture {
 protected:
  // A block registered in the session, header written, not yet opened.
  uint8_t* NewBlock(uint64_t* region_id, uint64_t bytes = kBlockBytes) {
    uint8_t* block = CreateRegion(bytes, session_, region_id);
    Put<uint32_t>(block, kChannelMagicOffset, kChannelMagic);
    Put<uint32_t>(block, kChannelVersionOffset, kChannelLayoutVersion);
    return block;
  }
  grpc::Status Open(uint64_t region_id, kiln::v1::OpenChannelResponse* resp) {
    grpc::ClientContext ctx;
    kiln::v1::OpenChannelRequest req;
    req.set_session_id(session_);
    req.set_region_id(region_id);
    return stub_->OpenChannel(&ctx, req, resp);
  }
  uint8_t* OpenBlock() {
    uint64_t id = 0;
    uint8_t* block = NewBlock(&id);
    kiln::v1::OpenChannelResponse resp;
    grpc::Status s = Open(id, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.max_tensors(), ChannelSlots(kBlockBytes));
    channel_id_ = resp.channel_id();
    return block;
  }

  template <typename T>
  static void Put(uint8_t* block, uint64_t offset, T v) {
    std::memcpy(block + offset, &v, sizeof v);
  }
  template <typename T>
  static T Get(const uint8_t* block, uint64_t offset) {
    T v;
    std::memcpy(&v, block + offset, sizeof v);
    return v;
  }

  struct Reply {
    bool answered = false;
    int code = -1;
    std::string message;
  };
  // Posts one call (slots: inputs then outputs) and waits for the reply as
  // a client does: sleeping on the state word.
  Reply Call(uint8_t* block, uint64_t handle, const std::vector<TensorSlot>& slots,
             uint32_t n_in, uint32_t n_out) {
    static std::atomic<uint64_t> next_seq{0};
    const uint64_t seq = ++next_seq;
    Put<uint64_t>(block, kRequestSeqOffset, seq);
    Put<uint64_t>(block, kRequestHandleOffset, handle);
    Put<uint32_t>(block, kRequestInputsOffset, n_in);
    Put<uint32_t>(block, kRequestOutputsOffset, n_out);
    for (size_t i = 0; i < slots.size(); ++i) {
      const uint64_t at = kSlotsOffset + i * kSlotBytes;
      Put<uint64_t>(block, at, slots[i].region_id);
      Put<uint64_t>(block, at + 8, slots[i].offset);
      Put<uint64_t>(block, at + 16, slots[i].byte_size);
    }
    auto* state = reinterpret_cast<uint32_t*>(block + kChannelStateOffset);
    StoreRelease(state, kChannelRequest);
    FutexWakeAll(state);
    Reply r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      uint32_t s = LoadAcquire(state);
      if (s == kChannelReply) break;
      if (std::chrono::steady_clock::now() > deadline) return r;
      FutexWait(state, s, std::chrono::milliseconds(50));
    }
    r.answered = true;
    EXPECT_EQ(Get<uint64_t>(block, kReplySeqOffset), seq);
    r.code = Get<int32_t>(block, kReplyCodeOffset);
    r.message.assign(reinterpret_cast<const char*>(block + kReplyMessageOffset),
                     Get<uint32_t>(block, kReplyMessageBytesOffset));
    StoreRelease(state, kChannelIdle);
    return r;
  }
  // relu over 16 floats at base_ + 0 into base_ + 4096.
  Reply CallRelu(uint8_t* block, uint64_t handle) {
    return Call(block, handle, {{region_id_, 0, 64}, {region_id_, 4096, 64}}, 1, 1);
  }
  void ExpectReluThroughChannel(uint8_t* block, uint64_t handle) {
    float* in = reinterpret_cast<float*>(base_);
    float* out = reinterpret_cast<float*>(base_ + 4096);
    for (int i = 0; i < 16; ++i) in[i] = static_cast<float>(i % 5 - 2);
    std::memset(out, 0xff, 64);
    Reply r = CallRelu(block, handle);
    ASSERT_TRUE(r.answered);
    ASSERT_EQ(r.code, 0) << r.message;
    for (int i = 0; i < 16; ++i) EXPECT_EQ(out[i], std::max(0.f, in[i]));
  }

  uint64_t channel_id_ = 0;
};

TEST_F(CallChannelTest, ExecutesThroughSharedMemory) {
  uint8_t* block = OpenBlock();
  uint64_t h = CompileRelu(16);
  for (int i = 0; i < 3; ++i) ExpectReluThroughChannel(block, h);
}

TEST_F(CallChannelTest, RequestFlagsOnlyChangeWhatTheDaemonDoesAfterTheRun) {
  uint8_t* block = OpenBlock();
  const uint64_t h = CompileRelu(16);
  // The client-computes-next flag, then every bit (unknown ones included):
  // same answers, and the flag stays the client's business.
  for (uint32_t flags : {kRequestFlagClientComputesNext, 0xffffffffu, 0u}) {
    Put<uint32_t>(block, kRequestFlagsOffset, flags);
    for (int i = 0; i < 3; ++i) ExpectReluThroughChannel(block, h);
    EXPECT_EQ(Get<uint32_t>(block, kRequestFlagsOffset), flags);
  }
}

TEST_F(CallChannelTest, ChannelCallsAreCountedAndTimedLikeExecuteCalls) {
  uint8_t* block = OpenBlock();
  const uint64_t h = CompileRelu(16);
  const MetricsSnapshot before = service_->CollectMetrics();
  for (int i = 0; i < 5; ++i) ExpectReluThroughChannel(block, h);
  EXPECT_NE(CallRelu(block, h + 100).code, 0);
  const MetricsSnapshot after = service_->CollectMetrics();
  EXPECT_EQ(after.executes - before.executes, 6u);
  EXPECT_EQ(after.execute_errors - before.execute_errors, 1u);
  uint64_t timed = 0;
  for (size_t i = 0; i < after.execute_seconds.counts.size(); ++i) {
    timed += after.execute_seconds.counts[i] - before.execute_seconds.counts[i];
  }
  EXPECT_EQ(timed, 6u);
}

TEST_F(CallChannelTest, BlockWithoutHeaderIsRefused) {
  uint64_t id = 0;
  uint8_t* block = NewBlock(&id);
  Put<uint32_t>(block, kChannelMagicOffset, 0x12345678);
  kiln::v1::OpenChannelResponse resp;
  grpc::Status s = Open(id, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("not a call channel block"), std::string::npos);
  Put<uint32_t>(block, kChannelMagicOffset, kChannelMagic);
  Put<uint32_t>(block, kChannelVersionOffset, kChannelLayoutVersion + 1);
  EXPECT_EQ(Open(id, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(CallChannelTest, TooSmallBlockAndForeignRegionAreRefused) {
  uint64_t small = 0;
  NewBlock(&small, 1024);
  kiln::v1::OpenChannelResponse resp;
  EXPECT_EQ(Open(small, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Open(987654, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(CallChannelTest, HostileCallsGetErrorRepliesAndServingContinues) {
  uint8_t* block = OpenBlock();
  uint64_t h = CompileRelu(16);
  const uint32_t most = static_cast<uint32_t>(ChannelSlots(kBlockBytes));
  // Counts past the block, and ones whose sum overflows 32 bits.
  Reply r = Call(block, h, {}, most, 1);
  ASSERT_TRUE(r.answered);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.message.find("the channel holds"), std::string::npos) << r.message;
  r = Call(block, h, {}, 0xffffffffu, 2);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  // A descriptor past the region's end, one that wraps around, too small.
  r = Call(block, h, {{region_id_, kRegionBytes - 32, 64}, {region_id_, 4096, 64}}, 1, 1);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.message.find("past the end"), std::string::npos) << r.message;
  r = Call(block, h, {{region_id_, ~uint64_t{0} - 8, 64}, {region_id_, 4096, 64}}, 1, 1);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  r = Call(block, h, {{region_id_, 0, 32}, {region_id_, 4096, 64}}, 1, 1);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  // Wrong tensor count, unknown handle, a region not registered here.
  r = Call(block, h, {{region_id_, 0, 64}}, 1, 0);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  r = Call(block, h + 100, {{region_id_, 0, 64}, {region_id_, 4096, 64}}, 1, 1);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kNotFound));
  // Region ids are per session: an id this session never registered.
  r = Call(block, h, {{region_id_ + 1000, 0, 64}, {region_id_, 4096, 64}}, 1, 1);
  EXPECT_EQ(r.code, static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(r.message.find("not registered in this session"), std::string::npos) << r.message;
  ExpectReluThroughChannel(block, h);
}

TEST_F(CallChannelTest, GarbageStateWordIsIgnored) {
  uint8_t* block = OpenBlock();
  uint64_t h = CompileRelu(16);
  auto* state = reinterpret_cast<uint32_t*>(block + kChannelStateOffset);
  StoreRelease(state, 0xdeadbeef);
  FutexWakeAll(state);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(LoadAcquire(state), 0xdeadbeefu);  // nothing served, nothing written
  StoreRelease(state, kChannelIdle);
  ExpectReluThroughChannel(block, h);
}

TEST_F(CallChannelTest, CloseChannelStopsServingAndMarksTheBlock) {
  uint8_t* block = OpenBlock();
  uint64_t h = CompileRelu(16);
  ExpectReluThroughChannel(block, h);
  grpc::ClientContext ctx;
  kiln::v1::CloseChannelRequest req;
  req.set_session_id(session_);
  req.set_channel_id(channel_id_);
  kiln::v1::CloseChannelResponse resp;
  ASSERT_TRUE(stub_->CloseChannel(&ctx, req, &resp).ok());
  EXPECT_EQ(Get<uint32_t>(block, kChannelClosedOffset), 1u);
  grpc::ClientContext again;
  EXPECT_EQ(stub_->CloseChannel(&again, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(CallChannelTest, ShutdownAnswersAPostedCallAndRefusesNewCalls) {
  uint64_t id = 0;
  NewBlock(&id);
  uint8_t* block = OpenBlock();
  uint64_t h = CompileRelu(16);
  ExpectReluThroughChannel(block, h);
  service_->Shutdown();
  EXPECT_EQ(Get<uint32_t>(block, kChannelClosedOffset), 1u);
  // Every new call, channel or not, is refused as the daemon goes down.
  kiln::v1::OpenChannelResponse resp;
  EXPECT_EQ(Open(id, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  kiln::v1::CompileResponse compiled;
  GraphBuilder b;
  int x = b.Input({16});
  b.Output(b.Call("aten.relu.default", {Ref(x)}));
  EXPECT_EQ(Compile(b.graph(), &compiled).error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Stop() while a call runs: the call finishes and is answered, then the
// block is marked closed.
TEST_F(CallChannelTest, StopLetsACallInProgressFinish) {
  const std::string name = "kiln-chan-test-" + std::to_string(getpid());
  int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kBlockBytes), 0);
  auto* block = static_cast<uint8_t*>(
      mmap(nullptr, kBlockBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  mappings_.emplace_back(block, kBlockBytes);
  Put<uint32_t>(block, kChannelMagicOffset, kChannelMagic);
  Put<uint32_t>(block, kChannelVersionOffset, kChannelLayoutVersion);
  auto region = ShmRegion::Open(name, kBlockBytes);
  shm_unlink(("/" + name).c_str());
  ASSERT_TRUE(region.ok()) << region.status();

  std::atomic<bool> started{false}, release{false};
  auto channel = CallChannel::Start(std::move(*region), [&](const ChannelCall& call) {
    started = true;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return call.handle == 7 ? absl::OkStatus() : absl::InternalError("wrong handle");
  });
  ASSERT_TRUE(channel.ok()) << channel.status();
  Reply reply;
  std::thread client([&] { reply = Call(block, 7, {}, 0, 0); });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  (*channel)->RequestStop();
  release = true;
  (*channel)->Join();
  client.join();
  ASSERT_TRUE(reply.answered);
  EXPECT_EQ(reply.code, 0) << reply.message;
  EXPECT_EQ(Get<uint32_t>(block, kChannelClosedOffset), 1u);
  EXPECT_EQ((*channel)->calls(), 1u);
}

TEST_F(CallChannelTest, ConcurrentChannelsEachGetTheirOwnResults) {
  uint64_t h = CompileRelu(16);
  constexpr int kClients = 4;
  std::vector<uint8_t*> blocks;
  for (int c = 0; c < kClients; ++c) blocks.push_back(OpenBlock());
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const uint64_t in_off = 8192 * (c + 1), out_off = in_off + 4096;
      float* in = reinterpret_cast<float*>(base_ + in_off);
      float* out = reinterpret_cast<float*>(base_ + out_off);
      for (int iter = 0; iter < 100; ++iter) {
        for (int i = 0; i < 16; ++i) in[i] = static_cast<float>((i + iter + c) % 7 - 3);
        Reply r = Call(blocks[c], h, {{region_id_, in_off, 64}, {region_id_, out_off, 64}}, 1, 1);
        if (!r.answered || r.code != 0) {
          failures++;
          continue;
        }
        for (int i = 0; i < 16; ++i) {
          if (out[i] != std::max(0.f, in[i])) failures++;
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace kiln::server
