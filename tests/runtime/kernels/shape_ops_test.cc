// Tests the shape ops (view/reshape/_unsafe_view, flatten, permute, t,
// clone): output shapes and values against index arithmetic done here.
#include "tests/runtime/kernels/typed_test_util.h"

namespace kiln::runtime::testing {
namespace {

// Runs a shape op on a random f32 input and returns the prepared tester.
struct ShapeRun {
  std::vector<float> x;
  std::unique_ptr<OpTester> t;
};

ShapeRun RunShapeOp(const std::string& target, std::vector<int64_t> shape,
                    std::vector<Arg> args,
                    std::vector<NamedArg> kwargs = {}) {
  ShapeRun r;
  r.x = RandomFloats(NumElements(shape), 13);
  r.t = std::make_unique<OpTester>(target);
  r.t->AddArg(r.t->Input(F32(shape), r.x));
  for (Arg& a : args) r.t->AddArg(a);
  for (NamedArg& kw : kwargs) r.t->AddKwarg(kw.name, kw.value);
  return r;
}

TEST(ViewTest, ViewReshapeAndUnsafeViewCopyInOrder) {
  for (const char* target : {"aten.view.default", "aten.reshape.default",
                             "aten._unsafe_view.default"}) {
    ShapeRun r = RunShapeOp(target, {2, 3, 4}, {IntListArg({4, -1, 2})});
    ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
    EXPECT_EQ(r.t->output_metas()[0], F32({4, 3, 2}));
    ASSERT_TRUE(r.t->Run().ok());
    EXPECT_TRUE(AllClose(r.t->OutputF32(0), ToDouble(r.x), 0, 0)) << target;
  }
}

// Integer and bool tensors (positions, masks) are viewed byte for byte.
TEST(ViewTest, I64AndBoolKeepTheirElementsInOrder) {
  for (const char* target : {"aten.view.default", "aten.reshape.default",
                             "aten._unsafe_view.default"}) {
    OpTester t(target);
    t.AddArg(I64Input(t, {2, 3}, {-3, 0, 7, 1 << 20, -(int64_t{1} << 40), 5}));
    t.AddArg(IntListArg({3, -1}));
    ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
    EXPECT_EQ(t.output_metas()[0], (TensorMeta{DType::kI64, {3, 2}}));
    ASSERT_TRUE(t.Run().ok());
    EXPECT_EQ(t.OutputI64(0),
              (std::vector<int64_t>{-3, 0, 7, 1 << 20, -(int64_t{1} << 40), 5})) << target;

    OpTester b(target);
    b.AddArg(BoolInput(b, {1, 5}, {1, 0, 0, 1, 1}));
    b.AddArg(IntListArg({5, 1, 1}));
    ASSERT_TRUE(b.Prepare().ok()) << b.Prepare();
    EXPECT_EQ(b.output_metas()[0], Bool({5, 1, 1}));
    Outputs out(b);
    ASSERT_TRUE(out.Run(b).ok());
    EXPECT_EQ(out.Bools(0), (std::vector<int>{1, 0, 0, 1, 1})) << target;
  }
}

TEST(ViewTest, ViewToScalarAndFromEmpty) {
  ShapeRun r = RunShapeOp("aten.view.default", {1, 1}, {IntListArg({})});
  ASSERT_TRUE(r.t->Prepare().ok());
  EXPECT_EQ(r.t->output_metas()[0], F32({}));
  ShapeRun e = RunShapeOp("aten.reshape.default", {0, 4}, {IntListArg({2, 0})});
  ASSERT_TRUE(e.t->Prepare().ok());
  EXPECT_TRUE(e.t->Run().ok());
}

TEST(ViewTest, ViewRejectsElementCountMismatch) {
  ShapeRun r = RunShapeOp("aten.view.default", {2, 3}, {IntListArg({4, 2})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(),
                                "shape [4,2] is invalid for input of size 6"));
}

TEST(ViewTest, ViewRejectsIndivisibleInferredSize) {
  ShapeRun r = RunShapeOp("aten.view.default", {2, 3}, {IntListArg({4, -1})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "is invalid for input"));
}

TEST(ViewTest, ViewRejectsTwoInferredDims) {
  ShapeRun r =
      RunShapeOp("aten.view.default", {2, 3}, {IntListArg({-1, -1})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "only one dimension"));
}

TEST(ViewTest, ViewRejectsNegativeSize) {
  ShapeRun r = RunShapeOp("aten.view.default", {2, 3}, {IntListArg({-2, -3})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "invalid size -2"));
}

TEST(ViewTest, ViewRejectsInferringFromEmptyTensor) {
  ShapeRun r = RunShapeOp("aten.view.default", {0, 3}, {IntListArg({0, -1})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "is invalid for input"));
}

struct FlattenCase {
  std::vector<int64_t> shape;
  int64_t start, end;
  std::vector<int64_t> out;
};

class FlattenTest : public ::testing::TestWithParam<FlattenCase> {};

TEST_P(FlattenTest, MatchesShapeAndKeepsOrder) {
  const FlattenCase& c = GetParam();
  ShapeRun r = RunShapeOp("aten.flatten.using_ints", c.shape,
                          {IntArg(c.start), IntArg(c.end)});
  ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
  EXPECT_EQ(r.t->output_metas()[0], F32(c.out));
  ASSERT_TRUE(r.t->Run().ok());
  EXPECT_TRUE(AllClose(r.t->OutputF32(0), ToDouble(r.x), 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Dims, FlattenTest,
    ::testing::Values(FlattenCase{{1, 512, 1, 1}, 1, -1, {1, 512}},
                      FlattenCase{{2, 3, 4, 5}, 0, -1, {120}},
                      FlattenCase{{2, 3, 4, 5}, 1, 2, {2, 12, 5}},
                      FlattenCase{{2, 3, 4, 5}, -3, -2, {2, 12, 5}},
                      FlattenCase{{2, 3}, 1, 1, {2, 3}},
                      FlattenCase{{}, 0, -1, {1}}));

TEST(FlattenTest, UsesDefaultsWhenAbsent) {
  ShapeRun r = RunShapeOp("aten.flatten.using_ints", {2, 3, 4}, {});
  ASSERT_TRUE(r.t->Prepare().ok());
  EXPECT_EQ(r.t->output_metas()[0], F32({24}));
}

TEST(FlattenTest, FlattenRejectsStartAfterEnd) {
  ShapeRun r = RunShapeOp("aten.flatten.using_ints", {2, 3, 4},
                          {IntArg(2), IntArg(1)});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "cannot come after"));
}

TEST(FlattenTest, FlattenRejectsDimOutOfRange) {
  ShapeRun r = RunShapeOp("aten.flatten.using_ints", {2, 3}, {IntArg(2)});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "out of range"));
}

// Reference permute: out[idx] = in[idx permuted back].
std::vector<double> ReferencePermute(const std::vector<int64_t>& shape,
                                     const std::vector<int>& dims,
                                     const std::vector<float>& x) {
  const int r = static_cast<int>(shape.size());
  std::vector<int64_t> out_shape(r), in_strides(r);
  int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    in_strides[d] = s;
    s *= shape[d];
  }
  for (int d = 0; d < r; ++d) out_shape[d] = shape[dims[d]];
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rem = i, off = 0;
    for (int d = r - 1; d >= 0; --d) {
      off += (rem % out_shape[d]) * in_strides[dims[d]];
      rem /= out_shape[d];
    }
    out[i] = x[off];
  }
  return out;
}

struct PermuteCase {
  std::vector<int64_t> shape;
  std::vector<int64_t> dims;
};

class PermuteTest : public ::testing::TestWithParam<PermuteCase> {};

TEST_P(PermuteTest, MatchesReference) {
  const PermuteCase& c = GetParam();
  ShapeRun r =
      RunShapeOp("aten.permute.default", c.shape, {IntListArg(c.dims)});
  ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
  std::vector<int> dims;
  for (int64_t d : c.dims) {
    dims.push_back(static_cast<int>(d < 0 ? d + c.shape.size() : d));
  }
  std::vector<int64_t> out_shape;
  for (int d : dims) out_shape.push_back(c.shape[d]);
  EXPECT_EQ(r.t->output_metas()[0], F32(out_shape));
  ASSERT_TRUE(r.t->Run().ok());
  EXPECT_TRUE(
      AllClose(r.t->OutputF32(0), ReferencePermute(c.shape, dims, r.x), 0, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Dims, PermuteTest,
    ::testing::Values(PermuteCase{{1000, 512}, {1, 0}},  // fc weight
                      PermuteCase{{37, 45}, {1, 0}},     // ragged tiles
                      PermuteCase{{2, 3, 4, 5}, {0, 2, 3, 1}},  // NCHW->NHWC
                      PermuteCase{{2, 3, 4, 5}, {3, 2, 1, 0}},
                      PermuteCase{{2, 3, 4}, {0, 1, 2}},  // identity
                      PermuteCase{{2, 1, 4}, {-1, 0, 1}},
                      PermuteCase{{5, 1, 1, 7}, {3, 1, 2, 0}},
                      PermuteCase{{}, {}},
                      // NHWC channel shuffles, groups 2 and 3: interleaved
                      // (8 floats at a time for 2 groups, then the tail).
                      PermuteCase{{2, 3, 3, 2, 58}, {0, 1, 2, 4, 3}},
                      PermuteCase{{4, 2, 5}, {0, 2, 1}},
                      PermuteCase{{3, 3, 7}, {0, 2, 1}},
                      PermuteCase{{2, 8, 16}, {0, 2, 1}}));

TEST(PermuteTest, PermuteRejectsRepeatedDim) {
  ShapeRun r =
      RunShapeOp("aten.permute.default", {2, 3}, {IntListArg({0, -2})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "repeats dimension 0"));
}

TEST(PermuteTest, PermuteRejectsWrongDimCount) {
  ShapeRun r = RunShapeOp("aten.permute.default", {2, 3}, {IntListArg({0})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "must list each"));
}

TEST(TTest, TransposesMatricesAndCopiesVectors) {
  ShapeRun m = RunShapeOp("aten.t.default", {3, 5}, {});
  ASSERT_TRUE(m.t->Prepare().ok());
  EXPECT_EQ(m.t->output_metas()[0], F32({5, 3}));
  ASSERT_TRUE(m.t->Run().ok());
  EXPECT_TRUE(AllClose(m.t->OutputF32(0),
                       ReferencePermute({3, 5}, {1, 0}, m.x), 0, 0));
  ShapeRun v = RunShapeOp("aten.t.default", {4}, {});
  ASSERT_TRUE(v.t->Prepare().ok());
  EXPECT_EQ(v.t->output_metas()[0], F32({4}));
  ASSERT_TRUE(v.t->Run().ok());
  EXPECT_TRUE(AllClose(v.t->OutputF32(0), ToDouble(v.x), 0, 0));
}

TEST(TTest, TRejectsRankThree) {
  ShapeRun r = RunShapeOp("aten.t.default", {2, 3, 4}, {});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "<= 2 dims"));
}

// Every format is a copy of the values: tensors here are dense in logical
// order and the client gives each output eager's strides.
TEST(CloneTest, CopiesTheValuesInEveryFormat) {
  for (int64_t format : {-1, 1, 2, 3}) {
    std::vector<NamedArg> kwargs;
    if (format >= 0) {
      kwargs.push_back({"memory_format", MemoryFormatArg(format)});
    }
    ShapeRun r = RunShapeOp("aten.clone.default", {2, 3, 4, 5}, {}, kwargs);
    ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
    EXPECT_EQ(r.t->output_metas()[0], F32({2, 3, 4, 5}));
    ASSERT_TRUE(r.t->Run().ok());
    EXPECT_TRUE(AllClose(r.t->OutputF32(0), ToDouble(r.x), 0, 0));
  }
}

TEST(CloneTest, CloneRejectsWhatIsNoMemoryFormat) {
  ShapeRun r = RunShapeOp("aten.clone.default", {2}, {},
                          {{"memory_format", IntArg(1)}});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "memory_format"));
  ShapeRun bad = RunShapeOp("aten.clone.default", {2}, {},
                            {{"memory_format", MemoryFormatArg(7)}});
  EXPECT_TRUE(IsInvalidArgument(bad.t->Prepare(), "memory_format"));
}

TEST(SqueezeTest, SqueezeDimsDropsOnlySizeOneDims) {
  ShapeRun r = RunShapeOp("aten.squeeze.dims", {3, 1, 2, 1},
                          {IntListArg({-1, 0, 1})});
  ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
  EXPECT_EQ(r.t->output_metas()[0], F32({3, 2}));  // dim 0 has size 3: kept
  ASSERT_TRUE(r.t->Run().ok());
  EXPECT_TRUE(AllClose(r.t->OutputF32(0), ToDouble(r.x), 0, 0));
  ShapeRun one = RunShapeOp("aten.squeeze.dim", {1, 4}, {IntArg(0)});
  ASSERT_TRUE(one.t->Prepare().ok());
  EXPECT_EQ(one.t->output_metas()[0], F32({4}));
}

TEST(SqueezeTest, SqueezeRejectsOutOfRangeDim) {
  ShapeRun r = RunShapeOp("aten.squeeze.dims", {3, 1}, {IntListArg({2})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "out of range"));
}

TEST(CopyTest, CopyBroadcastsSrcIntoSelfShape) {
  // swin's mask: a 0-dim value copied over a [4, 3] slice.
  OpTester t("aten.copy.default");
  t.SetArgs({t.Input(F32({4, 3}), RandomFloats(12, 1)), t.Input(F32({}), {5.0f})});
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  EXPECT_EQ(t.output_metas()[0], F32({4, 3}));
  ASSERT_TRUE(t.Run().ok());
  EXPECT_TRUE(AllClose(t.OutputF32(0), std::vector<double>(12, 5.0), 0, 0));

  const auto row = RandomFloats(3, 2);
  OpTester u("aten.copy.default");
  u.SetArgs({u.Input(F32({2, 3}), RandomFloats(6, 3)), u.Input(F32({3}), row)});
  ASSERT_TRUE(u.Prepare().ok());
  ASSERT_TRUE(u.Run().ok());
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i) {
    for (float v : row) expected.push_back(v);
  }
  EXPECT_TRUE(AllClose(u.OutputF32(0), expected, 0, 0));
}

TEST(CopyTest, CopyRejectsSrcThatDoesNotBroadcast) {
  OpTester t("aten.copy.default");
  t.SetArgs({t.Input(F32({2, 3}), RandomFloats(6, 1)),
             t.Input(F32({2}), RandomFloats(2, 2))});
  EXPECT_TRUE(IsInvalidArgument(t.Prepare(), "does not broadcast"));
}

TEST(AsStridedTest, AsStridedAcceptsRestrideThatKeepsOrder) {
  // convnext: mean's [1, 768, 1, 1] output restrided to channels-last
  // strides, which only differ on size-1 dims.
  for (const char* target : {"aten.as_strided_.default", "aten.as_strided.default"}) {
    ShapeRun r = RunShapeOp(target, {1, 768, 1, 1},
                            {IntListArg({1, 768, 1, 1}),
                             IntListArg({768, 1, 768, 768})});
    ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
    EXPECT_EQ(r.t->output_metas()[0], F32({1, 768, 1, 1}));
    ASSERT_TRUE(r.t->Run().ok());
    EXPECT_TRUE(AllClose(r.t->OutputF32(0), ToDouble(r.x), 0, 0));
  }
}

// Windows over the row-major elements: a transpose, and overlapping
// chunks with an offset (Longformer's sliding attention chunks).
TEST(AsStridedTest, AsStridedReadsAnyWindowOfTheElements) {
  ShapeRun r = RunShapeOp("aten.as_strided.default", {2, 3},
                          {IntListArg({3, 2}), IntListArg({1, 3})});
  ASSERT_TRUE(r.t->Prepare().ok()) << r.t->Prepare();
  ASSERT_TRUE(r.t->Run().ok());
  EXPECT_TRUE(AllClose(r.t->OutputF32(0), {r.x[0], r.x[3], r.x[1], r.x[4], r.x[2], r.x[5]}, 0, 0));

  ShapeRun off = RunShapeOp("aten.as_strided.default", {12},
                            {IntListArg({3, 4}), IntListArg({2, 1}), IntArg(3)});
  ASSERT_TRUE(off.t->Prepare().ok()) << off.t->Prepare();
  EXPECT_EQ(off.t->output_metas()[0], F32({3, 4}));
  ASSERT_TRUE(off.t->Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) want.push_back(off.x[3 + 2 * i + j]);
  EXPECT_TRUE(AllClose(off.t->OutputF32(0), want, 0, 0));
}

TEST(AsStridedTest, AsStridedRejectsReadsPastTheInput) {
  ShapeRun r = RunShapeOp("aten.as_strided.default", {2, 3},
                          {IntListArg({2, 3}), IntListArg({3, 1}), IntArg(1)});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "reads past"));
  ShapeRun neg = RunShapeOp("aten.as_strided.default", {2, 3},
                            {IntListArg({2, 3}), IntListArg({-3, 1})});
  EXPECT_TRUE(IsInvalidArgument(neg.t->Prepare(), "non-negative"));
}

TEST(AsStridedTest, AsStridedRejectsSizeAndStrideOfDifferentLength) {
  ShapeRun r = RunShapeOp("aten.as_strided.default", {2, 3},
                          {IntListArg({2, 3}), IntListArg({3})});
  EXPECT_TRUE(IsInvalidArgument(r.t->Prepare(), "same length"));
}

}  // namespace
}  // namespace kiln::runtime::testing

namespace kiln::runtime::testing {
namespace {

// permute, t, clone, flatten, squeeze and copy move i64 and bool elements
// (8 and 1 bytes) as they move f32 ones.
TEST(ShapeOpsTest, PermuteAndCopiesOfI64AndBool) {
  std::vector<int64_t> xi(2 * 3 * 4);
  std::vector<int> xb(2 * 3 * 4);
  for (int i = 0; i < 24; ++i) {
    xi[i] = 1000000000000LL * i - 7;
    xb[i] = (i * 7) % 3 == 0;
  }
  // permute [2, 3, 4] by (2, 0, 1): out[k, i, j] = x[i, j, k].
  std::vector<int64_t> want_i;
  std::vector<int> want_b;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        want_i.push_back(xi[(i * 3 + j) * 4 + k]);
        want_b.push_back(xb[(i * 3 + j) * 4 + k]);
      }
  OpTester pi("aten.permute.default");
  pi.AddArg(I64Input(pi, {2, 3, 4}, xi));
  pi.AddArg(IntListArg({2, 0, 1}));
  ASSERT_TRUE(pi.Prepare().ok()) << pi.Prepare();
  EXPECT_EQ(pi.output_metas()[0], I64({4, 2, 3}));
  ASSERT_TRUE(pi.Run().ok());
  EXPECT_EQ(pi.OutputI64(0), want_i);

  OpTester pb("aten.permute.default");
  pb.AddArg(BoolInput(pb, {2, 3, 4}, xb));
  pb.AddArg(IntListArg({2, 0, 1}));
  ASSERT_TRUE(pb.Prepare().ok()) << pb.Prepare();
  Outputs out(pb);
  ASSERT_TRUE(out.Run(pb).ok());
  EXPECT_EQ(out.Bools(0), want_b);

  for (const char* target : {"aten.clone.default", "aten.flatten.using_ints",
                             "aten.squeeze.dims"}) {
    OpTester c(target);
    c.AddArg(I64Input(c, {2, 3, 4}, xi));
    if (std::string(target) == "aten.squeeze.dims") c.AddArg(IntListArg({0}));
    ASSERT_TRUE(c.Prepare().ok()) << target << ": " << c.Prepare();
    ASSERT_TRUE(c.Run().ok());
    EXPECT_EQ(c.OutputI64(0), xi) << target;
  }
  // t of a [3, 2] i64 matrix, checked against a float reference too.
  OpTester t("aten.t.default");
  t.AddArg(I64Input(t, {3, 2}, {1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(t.Prepare().ok()) << t.Prepare();
  ASSERT_TRUE(t.Run().ok());
  const std::vector<int64_t> got = t.OutputI64(0);
  EXPECT_TRUE(AllClose(std::vector<float>(got.begin(), got.end()), {1, 3, 5, 2, 4, 6}, 0, 0));

  OpTester copy("aten.copy.default");
  copy.AddArg(I64Input(copy, {2, 2}, {0, 0, 0, 0}));
  copy.AddArg(I64Input(copy, {2}, {5, -6}));
  ASSERT_TRUE(copy.Prepare().ok()) << copy.Prepare();
  ASSERT_TRUE(copy.Run().ok());
  EXPECT_EQ(copy.OutputI64(0), (std::vector<int64_t>{5, -6, 5, -6}));
  OpTester mixed("aten.copy.default");
  mixed.AddArg(I64Input(mixed, {2}, {0, 0}));
  mixed.AddArg(mixed.Input(F32({2}), {1, 2}));
  EXPECT_EQ(mixed.Prepare().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::runtime::testing
