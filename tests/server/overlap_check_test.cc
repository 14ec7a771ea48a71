// Outputs that share bytes with an input or another output are refused;
// inputs may share, and separate objects never overlap.
#include "server/overlap_check.h"

#include <vector>

#include "gtest/gtest.h"

namespace kiln::server {
namespace {

TensorSpan In(uint64_t inode, uint64_t start, uint64_t end, int index = 0) {
  return TensorSpan{1, inode, start, end, false, index};
}
TensorSpan Out(uint64_t inode, uint64_t start, uint64_t end, int index = 0) {
  return TensorSpan{1, inode, start, end, true, index};
}

absl::Status Check(std::vector<TensorSpan> spans, std::vector<OutputOverInput> pairs = {}) {
  return CheckOutputsDisjoint(absl::MakeSpan(spans), pairs);
}

TEST(OverlapCheck, DisjointSpansPass) {
  EXPECT_TRUE(Check({In(7, 0, 64), Out(7, 64, 128), Out(7, 128, 129, 1)}).ok());
}

TEST(OverlapCheck, InputsMayShareBytes) {
  EXPECT_TRUE(Check({In(7, 0, 64), In(7, 32, 96, 1), Out(7, 96, 100)}).ok());
}

TEST(OverlapCheck, OutputOverAnInputIsRefusedNamingBoth) {
  absl::Status s = Check({In(7, 0, 64, 2), Out(7, 63, 70, 1)});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("output 1 shares memory with input 2"), absl::string_view::npos)
      << s.message();
}

TEST(OverlapCheck, InputInsideAnEarlierLongOutputIsRefused) {
  // The output starts first and reaches past a later, shorter output.
  EXPECT_FALSE(Check({Out(7, 0, 1000), Out(7, 1000, 1010, 1), In(7, 500, 501)}).ok());
}

TEST(OverlapCheck, TwoOutputsSharingBytesAreRefused) {
  EXPECT_FALSE(Check({Out(7, 0, 64), Out(7, 0, 64, 1)}).ok());
}

TEST(OverlapCheck, SameOffsetsInAnotherObjectDoNotOverlap) {
  EXPECT_TRUE(Check({In(7, 0, 64), Out(8, 0, 64)}).ok());
  EXPECT_TRUE(Check({TensorSpan{1, 7, 0, 64, false, 0}, TensorSpan{2, 7, 0, 64, true, 0}}).ok());
}

TEST(OverlapCheck, EmptyTensorsOverlapNothing) {
  EXPECT_TRUE(Check({In(7, 0, 64), Out(7, 10, 10)}).ok());
}

TEST(OverlapCheck, AnOutputMayCoverExactlyTheInputItIsDeclaredOver) {
  // Output 1 over input 2 (the graph's outputs_over_inputs).
  EXPECT_TRUE(Check({In(7, 0, 64, 2), Out(7, 0, 64, 1), In(7, 64, 128, 0), Out(7, 128, 192, 0)},
                    {{1, 2}})
                  .ok());
  // Not declared, or declared for another input: refused.
  EXPECT_FALSE(Check({In(7, 0, 64, 2), Out(7, 0, 64, 1)}).ok());
  EXPECT_FALSE(Check({In(7, 0, 64, 2), Out(7, 0, 64, 1)}, {{1, 0}}).ok());
  // Only exactly: shifted, shorter or longer spans are refused.
  for (const TensorSpan& out : {Out(7, 8, 72, 1), Out(7, 0, 32, 1), Out(7, 0, 65, 1)}) {
    EXPECT_FALSE(Check({In(7, 0, 64, 2), out}, {{1, 2}}).ok()) << out.start << " " << out.end;
  }
  // The same bytes in another object are not the input's.
  EXPECT_FALSE(Check({In(7, 0, 64, 2), Out(8, 0, 64, 1), Out(7, 0, 64, 0)}, {{1, 2}}).ok());
}

TEST(OverlapCheck, WhatOverlapsTheCoveredInputOverlapsItsOutput) {
  // Input 0 shares bytes with input 2, which output 1 covers: output 1
  // would rewrite input 0 mid-run.
  absl::Status s = Check({In(7, 0, 64, 2), Out(7, 0, 64, 1), In(7, 32, 96, 0)}, {{1, 2}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("output 1 shares memory with input 0"), absl::string_view::npos)
      << s.message();
  // And another output over it as well.
  EXPECT_FALSE(Check({In(7, 0, 64, 2), Out(7, 0, 64, 1), Out(7, 0, 64, 0)}, {{1, 2}}).ok());
}

TEST(OverlapCheck, AnEmptyTensorBetweenTwoObjectsJoinsNeither) {
  // Sorted, the empty input of object 8 comes between object 7's output
  // and object 8's: the two outputs are in different objects.
  EXPECT_TRUE(Check({Out(7, 0, 100, 0), In(8, 0, 0, 0), Out(8, 0, 64, 1)}).ok());
}

}  // namespace
}  // namespace kiln::server
