// Joined cats: inputs move into their cat's output only when nothing else
// can see the difference.
#include "runtime/plan/joined_in_place.h"

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

// Requests: 0 and 1 = the cat's inputs (waves 0 and 1), 2 = its output
// (wave 2, read in wave 3).
struct Fire {
  std::vector<BufferRequest> req = {{1024, 0, 2}, {2048, 1, 2}, {3072, 2, 3}};
  std::vector<bool> pinned = {false, false, false};
  std::vector<int> in_place = {0, 1, 2};
  JoinCandidate cat{2, {0, 1}, {0, 1024}};

  JoinPlan Share() { return ShareJoined({cat}, pinned, in_place, &req); }
};

TEST(ShareJoined, InputsLiveInTheirPartOfTheOutput) {
  Fire f;
  const JoinPlan plan = f.Share();
  ASSERT_EQ(plan.joined, std::vector<bool>{true});
  EXPECT_EQ(plan.owner, (std::vector<int>{2, 2, 2}));
  EXPECT_EQ(plan.offset_in_owner, (std::vector<int64_t>{0, 1024, 0}));
  EXPECT_EQ(f.req[0].bytes, 0);
  EXPECT_EQ(f.req[1].bytes, 0);
  // The output's bytes are taken from its first input's wave on.
  EXPECT_EQ(f.req[2].first, 0);
  EXPECT_EQ(f.req[2].last, 3);
  const MemoryPlan mem = PlanMemory(f.req);
  EXPECT_LE(mem.arena_bytes, 3072 + 2 * 64);
}

TEST(ShareJoined, AnInputReadLaterKeepsTheOutputAlive) {
  Fire f;
  f.req[0].last = 5;
  const JoinPlan plan = f.Share();
  ASSERT_EQ(plan.joined, std::vector<bool>{true});
  EXPECT_EQ(f.req[2].first, 0);
  EXPECT_EQ(f.req[2].last, 5);
}

TEST(ShareJoined, TheSameInputTwiceKeepsTheCopy) {
  Fire f;
  f.req[2].bytes = 2048;
  f.cat = {2, {0, 0}, {0, 1024}};
  EXPECT_EQ(f.Share().joined, std::vector<bool>{false});
}

TEST(ShareJoined, GraphOutputsKeepTheCopy) {
  for (int pinned : {0, 2}) {
    Fire f;
    f.pinned[pinned] = true;
    EXPECT_EQ(f.Share().joined, std::vector<bool>{false}) << "request " << pinned;
  }
}

TEST(ShareJoined, AnInputSharingBytesInPlaceKeepsTheCopy) {
  // Input 1 was written over input 0's bytes (a convolution's residual).
  Fire f;
  f.in_place = {0, 0, 2};
  EXPECT_EQ(f.Share().joined, std::vector<bool>{false});
  // Or another request lives in input 1's bytes.
  Fire g;
  g.req.push_back({2048, 3, 4});
  g.pinned.push_back(false);
  g.in_place = {0, 1, 2, 1};
  EXPECT_EQ(g.Share().joined, std::vector<bool>{false});
}

TEST(ShareJoined, AnOutputOverwrittenInPlaceKeepsTheCopy) {
  // Request 3 is written over the cat's output after its last read: an
  // input read later would see it.
  Fire f;
  f.req.push_back({3072, 3, 4});
  f.pinned.push_back(false);
  f.in_place = {0, 1, 2, 2};
  EXPECT_EQ(f.Share().joined, std::vector<bool>{false});
}

TEST(ShareJoined, UnalignedInputsKeepTheCopy) {
  Fire f;
  f.req[0].bytes = 1000;
  f.req[2].bytes = 3048;
  f.cat.offsets = {0, 1000};
  EXPECT_EQ(f.Share().joined, std::vector<bool>{false});
}

TEST(ShareJoined, AJoinedOutputIsNotAnInputOfAnotherJoin) {
  // Request 3 = a second cat of the first cat's output and request 4.
  Fire f;
  f.req.push_back({4096, 4, 5});
  f.req.push_back({1024, 3, 4});
  f.pinned.assign(5, false);
  f.in_place = {0, 1, 2, 3, 4};
  const JoinCandidate outer{3, {2, 4}, {0, 3072}};
  const JoinPlan plan = ShareJoined({f.cat, outer}, f.pinned, f.in_place, &f.req);
  EXPECT_EQ(plan.joined, (std::vector<bool>{true, false}));
  EXPECT_EQ(plan.owner[2], 2);
  EXPECT_EQ(f.req[4].bytes, 1024);
}

}  // namespace
}  // namespace kiln::runtime
