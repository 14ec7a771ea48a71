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

absl::Status Check(std::vector<TensorSpan> spans) { return CheckOutputsDisjoint(absl::MakeSpan(spans)); }

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

}  // namespace
}  // namespace kiln::server
