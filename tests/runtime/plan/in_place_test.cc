// In-place outputs: a residual's bytes are reused for the output that adds
// to it only when nothing else can still read them.
#include "runtime/plan/in_place.h"

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// Requests: 0 = residual (made in wave 0), 1 = the conv's input (wave 1),
// 2 = the conv's output (wave 2).
std::vector<BufferRequest> Bottleneck(int residual_last) {
  return {{4096, 0, residual_last}, {1024, 1, 2}, {4096, 2, 3}};
}

TEST(ShareInPlace, OutputTakesTheResidualsBytesWhenItIsTheLastReader) {
  std::vector<BufferRequest> req = Bottleneck(2);
  const std::vector<int> owner =
      ShareInPlace({{2, 2, 0, {1}}}, {{}, {0}, {0, 1}, {2}}, &req);
  EXPECT_EQ(owner[2], 0);
  EXPECT_EQ(owner[0], 0);
  EXPECT_EQ(owner[1], 1);
  EXPECT_EQ(req[2].bytes, 0);
  EXPECT_EQ(req[0].last, 3);  // now also holds the output
  // One buffer for both: the plan never needs room for the two at once.
  const MemoryPlan plan = PlanMemory(req);
  EXPECT_LE(plan.arena_bytes, 4096 + 1024 + 64);
}

TEST(ShareInPlace, ResidualReadLaterStaysSeparate) {
  std::vector<BufferRequest> req = Bottleneck(3);
  const std::vector<int> owner =
      ShareInPlace({{2, 2, 0, {1}}}, {{}, {0}, {0, 1}, {0, 2}}, &req);
  EXPECT_EQ(owner[2], 2);
  EXPECT_EQ(req[2].bytes, 4096);
}

TEST(ShareInPlace, ResidualReadByAnotherStepOfTheSameWaveStaysSeparate) {
  // A concurrent step of wave 2 reads the residual while the conv writes.
  std::vector<BufferRequest> req = Bottleneck(2);
  const std::vector<int> owner =
      ShareInPlace({{2, 2, 0, {1}}}, {{}, {0}, {0, 1, 0}, {2}}, &req);
  EXPECT_EQ(owner[2], 2);
}

TEST(ShareInPlace, ResidualThatIsAlsoTheConvInputStaysSeparate) {
  // y = conv(x) + x: the convolution reads x while writing y.
  std::vector<BufferRequest> req = {{4096, 0, 1}, {4096, 1, 2}};
  const std::vector<int> owner = ShareInPlace({{1, 1, 0, {0}}}, {{}, {0, 0}, {1}}, &req);
  EXPECT_EQ(owner[1], 1);
}

TEST(ShareInPlace, DifferentSizesStaySeparate) {
  std::vector<BufferRequest> req = {{4096, 0, 2}, {1024, 1, 2}, {8192, 2, 3}};
  const std::vector<int> owner =
      ShareInPlace({{2, 2, 0, {1}}}, {{}, {0}, {0, 1}, {2}}, &req);
  EXPECT_EQ(owner[2], 2);
}

TEST(ShareInPlace, ChainsOfResidualBlocksShareOneBuffer) {
  // x0 -> block -> x1 -> block -> x2, each output added in place to the
  // block's input: all three in the bytes of x0.
  std::vector<BufferRequest> req = {
      {4096, 0, 2},  // 0: x0
      {1024, 1, 2},  // 1: inner of block 1
      {4096, 2, 4},  // 2: x1
      {1024, 3, 4},  // 3: inner of block 2
      {4096, 4, 6},  // 4: x2 (a graph output: lives past the last wave)
  };
  const std::vector<int> owner = ShareInPlace(
      {{4, 4, 2, {3}}, {2, 2, 0, {1}}},  // out of wave order on purpose
      {{}, {0}, {0, 1}, {2}, {2, 3}, {4}}, &req);
  EXPECT_EQ(owner[2], 0);
  EXPECT_EQ(owner[4], 0);
  EXPECT_EQ(req[0].last, 6);
}

TEST(ShareInPlace, IgnoresCandidatesWithoutArenaRequests) {
  // A residual that is a graph input or a constant has no request (-1).
  std::vector<BufferRequest> req = {{4096, 0, 1}};
  const std::vector<int> owner = ShareInPlace({{0, 0, -1, {}}}, {{}}, &req);
  EXPECT_EQ(owner[0], 0);
  EXPECT_EQ(req[0].bytes, 4096);
}

}  // namespace
}  // namespace kiln::runtime
