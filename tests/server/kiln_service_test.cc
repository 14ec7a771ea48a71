// The real service over a real unix socket and real shared memory: bad
// requests get clear statuses and the daemon keeps serving good ones.
#include "server/kiln_service.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "runtime/ops/registry.h"
#include "runtime/util/sha256.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

using kiln::testing::F32Meta;
using kiln::testing::GraphBuilder;
using kiln::testing::Ref;
namespace fs = std::filesystem;

using KilnServiceTest = kiln::testing::ServiceFixture;

TEST_F(KilnServiceTest, CompileAndExecuteThroughSharedMemory) {
  ExpectReluWorks(CompileRelu(16));
}

TEST_F(KilnServiceTest, UnknownOpIsInvalidArgumentAndServingContinues) {
  GraphBuilder b;
  int x = b.Input({16});
  b.Output(b.Call("aten.not_a_kiln_op.default", {Ref(x)}, "unknown_node"));
  kiln::v1::CompileResponse resp;
  grpc::Status s = Compile(b.graph(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("unknown_node"), std::string::npos);
  ExpectReluWorks(CompileRelu(16));
}

TEST_F(KilnServiceTest, DanglingReferenceIsInvalidArgument) {
  GraphBuilder b;
  int x = b.Input({16});
  b.Output(b.Call("aten.relu.default", {Ref(x + 3)}));
  kiln::v1::CompileResponse resp;
  EXPECT_EQ(Compile(b.graph(), &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectReluWorks(CompileRelu(16));
}

TEST_F(KilnServiceTest, DescriptorPastRegionEndIsInvalidArgument) {
  uint64_t h = CompileRelu(16);
  grpc::Status s = Execute(h, Desc(kRegionBytes - 32, {16}), Desc(0, {16}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("past the end"), std::string::npos) << s.error_message();
  kiln::v1::TensorDescriptor huge = Desc(64, {16});
  huge.set_byte_size(~uint64_t{0});
  EXPECT_EQ(Execute(h, huge, Desc(0, {16})).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ExpectReluWorks(h);
}

TEST_F(KilnServiceTest, DescriptorWithWrongShapeIsInvalidArgument) {
  uint64_t h = CompileRelu(16);
  EXPECT_EQ(Execute(h, Desc(0, {8}), Desc(4096, {16})).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(KilnServiceTest, OtherSessionsHandlesAndRegionsAreNotVisible) {
  uint64_t h = CompileRelu(16);
  std::string other = OpenSession();
  EXPECT_EQ(Execute(h, Desc(0, {16}), Desc(4096, {16}), other).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Execute(h, Desc(0, {16}), Desc(4096, {16}), "no-such-session").error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(KilnServiceTest, ConstantWithWrongHashIsRefused) {
  std::vector<float> w = {1.f, 2.f, 3.f, 4.f};
  std::memcpy(base_, w.data(), 16);
  grpc::ClientContext ctx;
  kiln::v1::UploadConstantsRequest req;
  req.set_session_id(session_);
  auto* c = req.add_constants();
  c->set_hash(std::string(64, '0'));
  *c->mutable_data() = Desc(0, {4});
  kiln::v1::UploadConstantsResponse resp;
  EXPECT_EQ(stub_->UploadConstants(&ctx, req, &resp).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext ok_ctx;
  c->set_hash(runtime::Sha256Hex(w.data(), 16));
  grpc::Status s = stub_->UploadConstants(&ok_ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.stored(), 1u);
}

TEST_F(KilnServiceTest, QueryConstantsNeedsASession) {
  auto query = [&](const std::string& session, kiln::v1::QueryConstantsResponse* resp) {
    grpc::ClientContext ctx;
    kiln::v1::QueryConstantsRequest req;
    req.set_session_id(session);
    req.add_hashes(std::string(64, 'a'));
    return stub_->QueryConstants(&ctx, req, resp);
  };
  kiln::v1::QueryConstantsResponse resp;
  grpc::Status none = query("", &resp);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(none.error_message().find("OpenSession"), std::string::npos) << none.error_message();
  EXPECT_EQ(resp.missing_size(), 0);
  EXPECT_EQ(query(std::string(32, '0'), &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(resp.missing_size(), 0);
  ASSERT_TRUE(query(session_, &resp).ok());
  EXPECT_EQ(resp.missing_size(), 1);
}

// Clients partition against this answer alone: each public op of the
// schema with its dtypes and traits, and none of Kiln's internal ones.
TEST_F(KilnServiceTest, CapabilitiesListEveryPublicOpWithItsTraits) {
  grpc::ClientContext ctx;
  kiln::v1::CapabilitiesResponse resp;
  ASSERT_TRUE(stub_->GetCapabilities(&ctx, kiln::v1::CapabilitiesRequest(), &resp).ok());
  std::map<std::string, const kiln::v1::OpSupport*> listed;
  for (const kiln::v1::OpSupport& op : resp.ops()) listed[op.target()] = &op;
  size_t public_ops = 0;
  for (const runtime::OpDef& op : runtime::AllOps()) {
    auto it = listed.find(op.target);
    if (op.internal) {
      EXPECT_EQ(it, listed.end()) << op.target << " is internal";
      continue;
    }
    ++public_ops;
    ASSERT_NE(it, listed.end()) << op.target << " has no capability entry";
    runtime::DTypeMask mask = 0;
    for (int d : it->second->dtypes()) mask |= runtime::DTypeBit(static_cast<runtime::DType>(d));
    EXPECT_EQ(mask, op.dtypes) << op.target;
    std::vector<std::string> traits(it->second->traits().begin(), it->second->traits().end());
    std::vector<std::string> want;
    for (std::string_view t : runtime::TraitNames(op.traits)) want.emplace_back(t);
    EXPECT_EQ(traits, want) << op.target;
  }
  EXPECT_EQ(listed.size(), public_ops);
}

TEST_F(KilnServiceTest, SecondCompileOfTheSameGraphIsACacheHit) {
  CompileRelu(32);
  GraphBuilder b;
  int x = b.Input({32}, "renamed");
  b.Output(b.Call("aten.relu.default", {Ref(x)}, "also_renamed"));
  kiln::v1::CompileResponse resp;
  ASSERT_TRUE(Compile(b.graph(), &resp).ok());
  EXPECT_TRUE(resp.cache_hit());
}

TEST_F(KilnServiceTest, StatsCountEveryMissAsOneCompile) {
  auto stats = [&] {
    grpc::ClientContext ctx;
    kiln::v1::StatsResponse resp;
    EXPECT_TRUE(stub_->GetStats(&ctx, kiln::v1::StatsRequest(), &resp).ok());
    return resp;
  };
  CompileRelu(32);
  CompileRelu(32);
  CompileRelu(48);
  const kiln::v1::StatsResponse s = stats();
  EXPECT_EQ(s.graphs_compiled(), 2u);
  EXPECT_EQ(s.cache_misses(), s.graphs_compiled());
  EXPECT_EQ(s.memory_cache_hits(), 1u);
  EXPECT_EQ(s.cache_hits(), s.memory_cache_hits() + s.disk_cache_hits());
}

TEST_F(KilnServiceTest, CompileOptionsAreAppliedAndPartOfTheKey) {
  GraphBuilder b;
  int x = b.Input({16});
  b.Output(b.Call("aten.relu.default", {Ref(x)}));
  kiln::v1::CompileResponse plain, tuned;
  ASSERT_TRUE(Compile(b.graph(), &plain).ok());
  grpc::Status s = Compile(b.graph(), &tuned, "",
                           {{"num_threads", "1"}, {"hint", "throughput"}, {"precision", "bf16"}});
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_NE(plain.graph_key(), tuned.graph_key());
  EXPECT_FALSE(tuned.cache_hit());
  ExpectReluWorks(tuned.handle());
}

TEST_F(KilnServiceTest, BadCompileOptionIsInvalidArgumentNamingIt) {
  GraphBuilder b;
  int x = b.Input({16});
  b.Output(b.Call("aten.relu.default", {Ref(x)}));
  kiln::v1::CompileResponse resp;
  grpc::Status s = Compile(b.graph(), &resp, "", {{"hint", "fastest"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("hint"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("latency, throughput"), std::string::npos);
  s = Compile(b.graph(), &resp, "", {{"threads", "2"}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("num_threads, hint, precision"), std::string::npos);
  ExpectReluWorks(CompileRelu(16));
}

// Executions run off gRPC's threads; many at once from several clients
// must each finish with their own results.
TEST_F(KilnServiceTest, ConcurrentExecutesAllFinishWithTheirOwnResults) {
  const uint64_t latency = CompileRelu(16);
  const uint64_t throughput = CompileRelu(16, {{"hint", "throughput"}});
  std::vector<std::thread> clients;
  std::atomic<int> failures{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      // Each client its own slice of the region: inputs at 8 KiB * c.
      const uint64_t in_off = 8192 * (c + 1), out_off = in_off + 4096;
      float* in = reinterpret_cast<float*>(base_ + in_off);
      float* out = reinterpret_cast<float*>(base_ + out_off);
      for (int iter = 0; iter < 50; ++iter) {
        for (int i = 0; i < 16; ++i) in[i] = static_cast<float>((i + iter + c) % 7 - 3);
        grpc::Status s = Execute(c % 2 ? latency : throughput, Desc(in_off, {16}),
                                 Desc(out_off, {16}));
        if (!s.ok()) {
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

TEST_F(KilnServiceTest, MetricsCountWhatGetStatsCountsPlusLatencies) {
  const uint64_t h = CompileRelu(16);
  CompileRelu(16);  // a memory hit
  for (int i = 0; i < 3; ++i) ExpectReluWorks(h);
  EXPECT_FALSE(Execute(h + 100, Desc(0, {16}), Desc(4096, {16})).ok());  // unknown handle
  const MetricsSnapshot m = service_->CollectMetrics();
  grpc::ClientContext ctx;
  kiln::v1::StatsResponse stats;
  ASSERT_TRUE(stub_->GetStats(&ctx, kiln::v1::StatsRequest(), &stats).ok());
  EXPECT_EQ(m.compiles, 1u);
  EXPECT_EQ(m.compiles, stats.graphs_compiled());
  EXPECT_EQ(m.memory_cache_hits, 1u);
  EXPECT_EQ(m.cache_misses, stats.cache_misses());
  EXPECT_EQ(m.executes, 4u);
  EXPECT_EQ(m.executes, stats.executes());
  EXPECT_EQ(m.execute_errors, 1u);
  EXPECT_EQ(m.clients, stats.sessions());
  EXPECT_EQ(m.live_graphs, stats.live_graphs());
  auto total = [](const HistogramSnapshot& h) {
    uint64_t n = 0;
    for (uint64_t c : h.counts) n += c;
    return n;
  };
  // Every execute is timed, failed ones too; every compile that returned
  // a graph, hits too.
  EXPECT_EQ(total(m.execute_seconds), 4u);
  EXPECT_GT(m.execute_seconds.sum_s, 0);
  EXPECT_EQ(total(m.compile_seconds), 2u);
  EXPECT_GT(m.uptime_s, 0);
}

TEST_F(KilnServiceTest, IdleShutdownWaitsForTheLastSessionToClose) {
  // The fixture's session is open: never idle, however long.
  EXPECT_FALSE(service_->BeginIdleShutdown(absl::ZeroDuration()));
  {
    grpc::ClientContext ctx;
    kiln::v1::CloseSessionRequest req;
    req.set_session_id(session_);
    kiln::v1::CloseSessionResponse resp;
    ASSERT_TRUE(stub_->CloseSession(&ctx, req, &resp).ok());
  }
  // Idle time counts from the close.
  EXPECT_FALSE(service_->BeginIdleShutdown(absl::Seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_TRUE(service_->BeginIdleShutdown(absl::Milliseconds(100)));
  // From then on no session opens (as after SIGTERM).
  grpc::ClientContext ctx;
  kiln::v1::OpenSessionRequest req;
  req.set_pid(getpid());
  kiln::v1::OpenSessionResponse resp;
  EXPECT_EQ(stub_->OpenSession(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_FALSE(service_->BeginIdleShutdown(absl::ZeroDuration()));  // once only
}

}  // namespace
}  // namespace kiln::server
