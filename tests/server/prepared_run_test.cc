// The execution path on its own: a real Session, real shared memory and a
// real compiled graph, without the gRPC service. What a call may name is
// checked here once for both the Execute RPC and call channels.
#include "server/prepared_run.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::server {
namespace {

using kiln::testing::F32Meta;
using kiln::testing::GraphBuilder;
using kiln::testing::Ref;

constexpr int kN = 16;
constexpr uint64_t kTensorBytes = kN * sizeof(float);
constexpr uint64_t kRegionBytes = 4096;

class PreparedRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GraphBuilder b;
    int x = b.Input({kN});
    b.Output(b.Call("aten.relu.default", {Ref(x)}));
    ASSERT_NO_FATAL_FAILURE(AddHandle(b.graph(), &handle_));

    // Made, mapped and registered as a client does, then unlinked: the
    // session's mapping is all that keeps the memory.
    const std::string name = "kiln-" + std::to_string(getpid()) + "-prepared-run";
    int fd = shm_open(("/" + name).c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kRegionBytes)), 0);
    void* base = mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    auto region = ShmRegion::Open(name, kRegionBytes);
    shm_unlink(("/" + name).c_str());
    ASSERT_NE(base, MAP_FAILED);
    base_ = static_cast<uint8_t*>(base);
    ASSERT_TRUE(region.ok()) << region.status();
    auto id = session_.AddRegion(*std::move(region));
    ASSERT_TRUE(id.ok()) << id.status();
    region_id_ = *id;
  }
  void TearDown() override {
    if (base_ != nullptr) munmap(base_, kRegionBytes);
  }

  // Compiles `graph` and adds it to the session as *handle.
  void AddHandle(const kiln::v1::Graph& graph, uint64_t* handle) {
    auto ir = runtime::GraphFromProto(graph);
    ASSERT_TRUE(ir.ok()) << ir.status();
    kiln::testing::ConstantTable consts;
    auto compiled = runtime::Compile(*std::move(ir), consts.Resolver());
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto added = session_.AddHandle(*std::move(compiled));
    ASSERT_TRUE(added.ok()) << added.status();
    *handle = *added;
  }

  TensorSlot Slot(uint64_t offset, uint64_t bytes = kTensorBytes) const {
    return TensorSlot{region_id_, offset, bytes};
  }
  kiln::v1::TensorDescriptor Descriptor(uint64_t offset, const std::vector<int64_t>& shape) const {
    kiln::v1::TensorDescriptor d;
    *d.mutable_meta() = F32Meta(shape);
    d.set_region_id(region_id_);
    d.set_offset(offset);
    d.set_byte_size(kTensorBytes);
    return d;
  }
  float* Floats(uint64_t offset) const { return reinterpret_cast<float*>(base_ + offset); }

  Session session_{"prepared-run-session", getpid(), "prepared_run_test"};
  uint64_t handle_ = 0;
  uint64_t region_id_ = 0;
  uint8_t* base_ = nullptr;
};

TEST_F(PreparedRunTest, RunsTheGraphOnTheSessionsSharedMemory) {
  for (int i = 0; i < kN; ++i) Floats(0)[i] = static_cast<float>(i - kN / 2);
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kTensorBytes)};
  auto run = PrepareRun(session_, handle_, in, out);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(RunPrepared(*run).ok());
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(Floats(kTensorBytes)[i], i < kN / 2 ? 0.0f : static_cast<float>(i - kN / 2)) << i;
  }
}

TEST_F(PreparedRunTest, RunOutlivesItsRegionsUnregistering) {
  for (int i = 0; i < kN; ++i) Floats(0)[i] = 1.0f + static_cast<float>(i);
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kTensorBytes)};
  auto run = PrepareRun(session_, handle_, in, out);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(session_.RemoveRegion(region_id_).ok());
  ASSERT_TRUE(RunPrepared(*run).ok());
  for (int i = 0; i < kN; ++i) EXPECT_EQ(Floats(kTensorBytes)[i], 1.0f + static_cast<float>(i));
  // A new run can no longer name it.
  auto again = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PreparedRunTest, WrongTensorCountNamesBothCounts) {
  const TensorSlot in[] = {Slot(0), Slot(2 * kTensorBytes)}, out[] = {Slot(kTensorBytes)};
  auto run = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("takes 1 inputs and 1 outputs; the request has 2 and 1"),
            std::string::npos)
      << run.status();
}

TEST_F(PreparedRunTest, UnknownHandleIsNotFound) {
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kTensorBytes)};
  EXPECT_EQ(PrepareRun(session_, handle_ + 1, in, out).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(PreparedRunTest, SlotSmallerThanTheTensorNamesIt) {
  const TensorSlot in[] = {Slot(0, kTensorBytes - 4)}, out[] = {Slot(kTensorBytes)};
  auto run = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("input 0: descriptor holds 60 bytes"), std::string::npos)
      << run.status();
}

TEST_F(PreparedRunTest, MisalignedOffsetIsInvalidArgument) {
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kTensorBytes + 2)};
  auto run = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("output 0: offset"), std::string::npos) << run.status();
}

TEST_F(PreparedRunTest, SlotPastTheRegionEndIsInvalidArgument) {
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kRegionBytes - kTensorBytes / 2)};
  auto run = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("output 0"), std::string::npos) << run.status();
}

TEST_F(PreparedRunTest, OutputOverlappingTheInputIsRefused) {
  const TensorSlot in[] = {Slot(0)}, out[] = {Slot(kTensorBytes / 2)};
  auto run = PrepareRun(session_, handle_, in, out);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("shares memory with"), std::string::npos)
      << run.status();
}

TEST_F(PreparedRunTest, AnOutputDeclaredOverAnInputRunsOnItsBytes) {
  // relu(x) declared as an update of x (Graph.outputs_over_inputs).
  GraphBuilder b;
  int x = b.Input({kN});
  b.Output(b.Call("aten.relu.default", {Ref(x)}));
  kiln::v1::OutputOverInput* pair = b.graph().add_outputs_over_inputs();
  pair->set_output(0);
  pair->set_input(0);
  uint64_t over = 0;
  ASSERT_NO_FATAL_FAILURE(AddHandle(b.graph(), &over));
  for (int i = 0; i < kN; ++i) Floats(0)[i] = static_cast<float>(i - kN / 2);
  const TensorSlot in[] = {Slot(0)}, same[] = {Slot(0)};
  auto run = PrepareRun(session_, over, in, same);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(RunPrepared(*run).ok());
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(Floats(0)[i], i < kN / 2 ? 0.0f : static_cast<float>(i - kN / 2)) << i;
  }
  // Only exactly over it: a shifted output is refused, as it is for a
  // graph that declares nothing.
  const TensorSlot shifted[] = {Slot(sizeof(float))};
  EXPECT_EQ(PrepareRun(session_, over, in, shifted).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PrepareRun(session_, handle_, in, same).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PreparedRunTest, ExecuteRequestWithAnotherShapeNamesBoth) {
  kiln::v1::ExecuteRequest req;
  req.set_handle(handle_);
  *req.add_inputs() = Descriptor(0, {2, kN / 2});
  *req.add_outputs() = Descriptor(kTensorBytes, {kN});
  auto run = PrepareExecuteRequest(session_, req);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("input 0: tensor is"), std::string::npos)
      << run.status();
  EXPECT_NE(run.status().message().find("the graph expects"), std::string::npos)
      << run.status();
}

TEST_F(PreparedRunTest, ExecuteRequestWithMatchingDescriptorsRuns) {
  for (int i = 0; i < kN; ++i) Floats(0)[i] = -1.0f;
  kiln::v1::ExecuteRequest req;
  req.set_handle(handle_);
  *req.add_inputs() = Descriptor(0, {kN});
  *req.add_outputs() = Descriptor(kTensorBytes, {kN});
  auto run = PrepareExecuteRequest(session_, req);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(RunPrepared(*run).ok());
  for (int i = 0; i < kN; ++i) EXPECT_EQ(Floats(kTensorBytes)[i], 0.0f);
}

TEST_F(PreparedRunTest, ExecuteRequestWithTooFewTensorsNamesTheCounts) {
  kiln::v1::ExecuteRequest req;
  req.set_handle(handle_);
  *req.add_inputs() = Descriptor(0, {kN});
  auto run = PrepareExecuteRequest(session_, req);
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(run.status().message().find("the request has 1 and 0"), std::string::npos)
      << run.status();
}

}  // namespace
}  // namespace kiln::server
