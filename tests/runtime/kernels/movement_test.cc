// flip, repeat and index_select (movement.cc) against index arithmetic
// done here, for every dtype.
#include <cstring>
#include <string>

#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

TEST(MovementTest, FlipReversesTheListedDims) {
  const auto x = RandomFloats(24, 31);
  OpTester t("aten.flip.default");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntListArg({0, -1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(x[((1 - i) * 3 + j) * 4 + (3 - k)]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester b("aten.flip.default");
  b.AddArg(BoolInput(b, {3}, {1, 0, 0}));
  b.AddArg(IntListArg({0}));
  ASSERT_TRUE(b.Prepare().ok()) << b.Prepare();
  Outputs out(b);
  ASSERT_TRUE(out.Run(b).ok());
  EXPECT_EQ(out.Bools(0), (std::vector<int>{0, 0, 1}));
}

TEST(MovementTest, RepeatTilesAndAddsLeadingDims) {
  const auto x = RandomFloats(6, 32);
  OpTester t("aten.repeat.default");
  t.AddArg(t.Input(F32({2, 3}), x));
  t.AddArg(IntListArg({2, 1, 2}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 2, 6}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 6; ++j) want.push_back(x[i * 3 + j % 3]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester i("aten.repeat.default");
  i.AddArg(I64Input(i, {2}, {7, -8}));
  i.AddArg(IntListArg({3}));
  ASSERT_TRUE(i.Prepare().ok()) << i.Prepare();
  ASSERT_TRUE(i.Run().ok());
  EXPECT_EQ(i.OutputI64(0), (std::vector<int64_t>{7, -8, 7, -8, 7, -8}));

  OpTester bad("aten.repeat.default");
  bad.AddArg(bad.Input(F32({2, 3}), x));
  bad.AddArg(IntListArg({2}));
  EXPECT_TRUE(IsInvalidArgument(bad.Prepare(), "at least as many dims"));
}

// Overlapping windows along a middle dim: out[i, w, j, k] = x[i, w*2+k, j].
TEST(MovementTest, UnfoldMakesSlidingWindows) {
  const auto x = RandomFloats(2 * 7 * 3, 34);
  OpTester t("aten.unfold.default");
  t.AddArg(t.Input(F32({2, 7, 3}), x));
  t.AddArg(IntArg(1));
  t.AddArg(IntArg(3));
  t.AddArg(IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 3, 3, 3}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int w = 0; w < 3; ++w)
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 3; ++k) want.push_back(x[(i * 7 + w * 2 + k) * 3 + j]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester bad("aten.unfold.default");
  bad.AddArg(bad.Input(F32({4}), {1, 2, 3, 4}));
  bad.AddArg(IntArg(0));
  bad.AddArg(IntArg(5));
  bad.AddArg(IntArg(1));
  EXPECT_TRUE(IsInvalidArgument(bad.Prepare(), "size 5"));
}

// diagonal(x, offset, dim1, dim2) of [2, 3, 4]: above (offset 1 over dims
// 0 and 2) and below (offset -1 over dims 2 and 0) the main diagonal.
TEST(MovementTest, DiagonalWalksTwoDimsAtOnce) {
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>(i);
  OpTester t("aten.diagonal.default");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntArg(1));
  t.AddArg(IntArg(0));
  t.AddArg(IntArg(2));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({3, 2}));
  ASSERT_TRUE(t.Run().ok());
  std::vector<double> want;  // out[j, k] = x[k, j, k + 1]
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 2; ++k) want.push_back(x[(k * 3 + j) * 4 + k + 1]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester below("aten.diagonal.default");
  below.AddArg(below.Input(F32({2, 3, 4}), x));
  below.AddArg(IntArg(-1));
  below.AddArg(IntArg(2));
  below.AddArg(IntArg(0));
  ASSERT_TRUE(below.Prepare().ok()) << below.Prepare();
  ASSERT_TRUE(below.Run().ok());
  EXPECT_TRUE(AllClose(below.OutputF32(0), {1, 14, 5, 18, 9, 22}, 0, 0));
}

TEST(MovementTest, IndexSelectPicksRowsAndChecksTheIndex) {
  const auto x = RandomFloats(24, 33);
  OpTester t("aten.index_select.default");
  t.AddArg(t.Input(F32({2, 3, 4}), x));
  t.AddArg(IntArg(1));
  t.AddArg(I64Input(t, {4}, {2, 0, 2, 1}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({2, 4, 4}));
  ASSERT_TRUE(t.Run().ok());
  const int64_t idx[] = {2, 0, 2, 1};
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(x[(i * 3 + idx[j]) * 4 + k]);
  EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));

  OpTester out_of_range("aten.index_select.default");
  out_of_range.AddArg(out_of_range.Input(F32({3}), {1, 2, 3}));
  out_of_range.AddArg(IntArg(0));
  out_of_range.AddArg(I64Input(out_of_range, {1}, {3}));
  ASSERT_TRUE(out_of_range.Prepare().ok()) << out_of_range.Prepare();
  EXPECT_EQ(out_of_range.Run().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MovementTest, IndexSelectOfConsecutiveIndicesAlongTheLastDim) {
  // XLNet's relative shift: arange(1, 4) of a last dim of 6, and a
  // nearly consecutive index that must not take the run path.
  const auto x = RandomFloats(5 * 6, 34);
  for (const std::vector<int64_t>& idx :
       {std::vector<int64_t>{1, 2, 3}, std::vector<int64_t>{1, 2, 4}}) {
    OpTester t("aten.index_select.default");
    t.AddArg(t.Input(F32({5, 6}), x));
    t.AddArg(IntArg(-1));
    t.AddArg(I64Input(t, {3}, idx));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    ASSERT_TRUE(t.Run().ok());
    std::vector<double> want;
    for (int i = 0; i < 5; ++i)
      for (int64_t j : idx) want.push_back(x[i * 6 + j]);
    EXPECT_TRUE(AllClose(t.OutputF32(0), want, 0, 0));
  }
}

// The data movement ops copy elements by size, so i32 (Hugging Face's
// int32 masks and positions) moves like the other types.
TEST(MovementTest, MovesI32) {
  const std::vector<int32_t> x = {0, 1, 2, 3, 4, 5};  // [2, 3]
  struct Case {
    const char* op;
    std::vector<Arg> extra;
    std::vector<int64_t> shape;
    std::vector<int32_t> want;
  };
  for (const Case& c : {
           Case{"aten.permute.default", {IntListArg({1, 0})}, {3, 2}, {0, 3, 1, 4, 2, 5}},
           Case{"aten.slice.Tensor", {IntArg(1), IntArg(1), IntArg(3)}, {2, 2}, {1, 2, 4, 5}},
           Case{"aten.flip.default", {IntListArg({1})}, {2, 3}, {2, 1, 0, 5, 4, 3}},
           Case{"aten.view.default", {IntListArg({3, 2})}, {3, 2}, {0, 1, 2, 3, 4, 5}},
           Case{"aten.clone.default", {}, {2, 3}, {0, 1, 2, 3, 4, 5}},
       }) {
    OpTester t(c.op);
    t.AddArg(I32Input(t, {2, 3}, x));
    for (const Arg& a : c.extra) t.AddArg(a);
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], I32(c.shape)) << c.op;
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok()) << c.op;
    EXPECT_EQ(out.As<int32_t>(0), c.want) << c.op;
  }
  OpTester cat("aten.cat.default");
  cat.AddArg(ListArg({I32Input(cat, {2, 3}, x), I32Input(cat, {1, 3}, {7, 8, 9})}));
  ASSERT_TRUE(cat.Prepare().ok()) << cat.Prepare();
  Outputs out(cat);
  ASSERT_TRUE(out.Run(cat).ok());
  EXPECT_EQ(out.As<int32_t>(0), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 7, 8, 9}));
  // An f32 reference for AllClose's sake: the same moves of floats.
  OpTester f("aten.flip.default");
  f.AddArg(f.Input(F32({2, 3}), {0, 1, 2, 3, 4, 5}));
  f.AddArg(IntListArg({0}));
  ASSERT_TRUE(f.Prepare().ok());
  ASSERT_TRUE(f.Run().ok());
  EXPECT_TRUE(AllClose(f.OutputF32(0), {3, 4, 5, 0, 1, 2}, 0, 0));
}

// Every other element size moves too (1, 2 and 8 bytes; the values are
// distinct bit patterns, so any misplaced byte shows).
template <typename T>
void ExpectMoves(DType dtype) {
  std::vector<T> x(6);
  for (int i = 0; i < 6; ++i) std::memset(&x[i], 0x11 * (i + 1), sizeof(T));
  struct Case {
    const char* op;
    std::vector<Arg> extra;
    std::vector<int> want;  // positions in x
  };
  for (const Case& c : {
           Case{"aten.permute.default", {IntListArg({1, 0})}, {0, 3, 1, 4, 2, 5}},
           Case{"aten.slice.Tensor", {IntArg(1), IntArg(1), IntArg(3)}, {1, 2, 4, 5}},
           Case{"aten.flip.default", {IntListArg({1})}, {2, 1, 0, 5, 4, 3}},
           Case{"aten.index_select.default", {}, {}},
       }) {
    OpTester t(c.op);
    t.AddArg(t.RawInput(TensorMeta{dtype, {2, 3}}, x.data(), x.size() * sizeof(T)));
    std::vector<int> want = c.want;
    if (std::string(c.op) == "aten.index_select.default") {
      t.AddArg(IntArg(1));
      t.AddArg(I64Input(t, {2}, {2, 0}));
      want = {2, 0, 5, 3};
    }
    for (const Arg& a : c.extra) t.AddArg(a);
    ASSERT_TRUE(t.Prepare().ok()) << c.op << ": " << t.Prepare();
    EXPECT_EQ(t.output_metas()[0].dtype, dtype) << c.op;
    Outputs out(t);
    ASSERT_TRUE(out.Run(t).ok()) << c.op;
    const std::vector<T> got = out.As<T>(0);
    ASSERT_EQ(got.size(), want.size()) << c.op;
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(std::memcmp(&got[k], &x[want[k]], sizeof(T)), 0) << c.op << " element " << k;
    }
  }
}

TEST(MovementTest, MovesEveryElementSize) {
  ExpectMoves<uint8_t>(DType::kU8);
  ExpectMoves<int8_t>(DType::kI8);
  ExpectMoves<uint16_t>(DType::kF16);
  ExpectMoves<uint16_t>(DType::kBF16);
  ExpectMoves<int16_t>(DType::kI16);
  ExpectMoves<double>(DType::kF64);
}

}  // namespace
}  // namespace kiln::runtime::testing
