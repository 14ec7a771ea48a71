// ComposeViews through Compile(): chains of movement ops become one strided
// read of their source and give exactly the elements the ops, run one by
// one, would. Random chains are checked against a reference that applies
// each op to a dense tensor.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ir/tensor_meta.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/reference_head_scores.h"

namespace kiln::runtime {
namespace {

using kiln::testing::ConstantTable;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::None;
using kiln::testing::Ref;

// A dense row-major tensor for the reference.
struct Dense {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

int64_t Count(const std::vector<int64_t>& shape) {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

// out[idx] = in.data[offset + sum idx_d * strides_d]
Dense Gather(const Dense& in, const std::vector<int64_t>& shape,
             const std::vector<int64_t>& strides, int64_t offset) {
  Dense out{shape, std::vector<float>(Count(shape))};
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < Count(shape); ++i) {
    int64_t at = offset;
    for (size_t d = 0; d < shape.size(); ++d) at += idx[d] * strides[d];
    out.data[i] = in.data[at];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// One movement op: its graph call and its reference.
struct Op {
  std::string target;
  std::vector<kiln::v1::Argument> literals;  // after self
  Dense (*apply)(const Dense&, const Op&) = nullptr;
  std::vector<int64_t> a;  // the op's numbers, for the reference
};

Dense ApplyPermute(const Dense& in, const Op& op) {
  const std::vector<int64_t> st = ContiguousStrides(in.shape);
  std::vector<int64_t> shape, strides;
  for (int64_t d : op.a) {
    shape.push_back(in.shape[d]);
    strides.push_back(st[d]);
  }
  return Gather(in, shape, strides, 0);
}

// a = {dim, start, end, step}, already clamped.
Dense ApplySlice(const Dense& in, const Op& op) {
  std::vector<int64_t> shape = in.shape, strides = ContiguousStrides(in.shape);
  const int64_t dim = op.a[0], start = op.a[1], end = op.a[2], step = op.a[3];
  shape[dim] = (end - start + step - 1) / step;
  const int64_t offset = start * strides[dim];
  strides[dim] *= step;
  return Gather(in, shape, strides, offset);
}

// a = {dim, index >= 0}
Dense ApplySelect(const Dense& in, const Op& op) {
  std::vector<int64_t> shape = in.shape, strides = ContiguousStrides(in.shape);
  const int64_t offset = op.a[1] * strides[op.a[0]];
  shape.erase(shape.begin() + op.a[0]);
  strides.erase(strides.begin() + op.a[0]);
  return Gather(in, shape, strides, offset);
}

// a = the new shape (same rank or one more in front).
Dense ApplyExpand(const Dense& in, const Op& op) {
  const std::vector<int64_t> st = ContiguousStrides(in.shape);
  const size_t lead = op.a.size() - in.shape.size();
  std::vector<int64_t> strides(op.a.size(), 0);
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] == op.a[lead + d]) strides[lead + d] = st[d];
  }
  return Gather(in, op.a, strides, 0);
}

// a = the new shape.
Dense ApplyReshape(const Dense& in, const Op& op) { return Dense{op.a, in.data}; }

// a = {size..., stride..., offset}
Dense ApplyAsStrided(const Dense& in, const Op& op) {
  const size_t rank = (op.a.size() - 1) / 2;
  return Gather(in, std::vector<int64_t>(op.a.begin(), op.a.begin() + rank),
                std::vector<int64_t>(op.a.begin() + rank, op.a.begin() + 2 * rank), op.a.back());
}

// A random movement op on a tensor of `shape`.
Op RandomOp(const std::vector<int64_t>& shape, std::mt19937& rng) {
  auto pick = [&](int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t rank = static_cast<int64_t>(shape.size());
  for (;;) {
    switch (pick(0, 6)) {
      case 0: {  // permute, some dims written negative
        if (rank < 2) break;
        std::vector<int64_t> dims(rank);
        std::iota(dims.begin(), dims.end(), 0);
        std::shuffle(dims.begin(), dims.end(), rng);
        std::vector<int64_t> written = dims;
        for (int64_t& d : written) {
          if (pick(0, 1) == 1) d -= rank;
        }
        return Op{"aten.permute.default", {IntList(written)}, ApplyPermute, dims};
      }
      case 1: {  // slice with ATen's bounds: negative, past the end, None
        const int64_t dim = pick(0, rank - 1), size = shape[dim];
        if (size < 2) break;
        const int64_t start = pick(-size, size - 1), end = pick(-size + 1, size + 3);
        const int64_t step = pick(1, 3);
        int64_t s = start < 0 ? start + size : start, e = end < 0 ? end + size : end;
        s = std::clamp<int64_t>(s, 0, size);
        e = std::clamp<int64_t>(e, s, size);
        if (e <= s) break;
        const bool open_end = pick(0, 3) == 0 && e == size;
        return Op{"aten.slice.Tensor",
                  {Int(dim), Int(start), open_end ? None() : Int(end), Int(step)},
                  ApplySlice,
                  {dim, s, e, step}};
      }
      case 2: {  // select, index maybe negative
        if (rank < 2) break;
        const int64_t dim = pick(0, rank - 1), index = pick(0, shape[dim] - 1);
        const int64_t written = pick(0, 1) == 1 ? index - shape[dim] : index;
        return Op{"aten.select.int", {Int(dim), Int(written)}, ApplySelect, {dim, index}};
      }
      case 3: {  // expand a size-1 dim, or a new leading one
        std::vector<int64_t> to = shape;
        bool grew = false;
        for (int64_t& s : to) {
          if (s == 1) {
            s = pick(2, 3);
            grew = true;
            break;
          }
        }
        if (!grew) {
          if (rank >= 4) break;
          to.insert(to.begin(), pick(2, 3));
        }
        return Op{"aten.expand.default", {IntList(to)}, ApplyExpand, to};
      }
      case 4: {  // unsqueeze
        if (rank >= 4) break;
        const int64_t dim = pick(0, rank);
        std::vector<int64_t> to = shape;
        to.insert(to.begin() + dim, 1);
        return Op{"aten.unsqueeze.default", {Int(dim)}, ApplyReshape, to};
      }
      case 5: {  // view: merge two neighbours or split one
        std::vector<int64_t> to = shape;
        if (rank >= 2 && pick(0, 1) == 0) {
          const int64_t d = pick(0, rank - 2);
          to[d] *= to[d + 1];
          to.erase(to.begin() + d + 1);
        } else {
          const int64_t d = pick(0, rank - 1);
          if (rank >= 4 || to[d] % 2 != 0) break;
          to[d] /= 2;
          to.insert(to.begin() + d + 1, 2);
        }
        std::vector<int64_t> written = to;
        written[pick(0, static_cast<int64_t>(to.size()) - 1)] = -1;
        return Op{"aten.view.default", {IntList(written)}, ApplyReshape, to};
      }
      case 6: {  // as_strided: overlapping windows of the dense value
        const int64_t n = Count(shape);
        if (n < 6) break;
        const int64_t rows = pick(1, 3), cols = pick(1, 3), step = pick(1, 2);
        const int64_t offset = pick(0, 2);
        if (offset + (rows - 1) * step + (cols - 1) >= n) break;
        return Op{"aten.as_strided.default",
                  {IntList({rows, cols}), IntList({step, 1}), Int(offset)},
                  ApplyAsStrided,
                  {rows, cols, step, 1, offset}};
      }
    }
  }
}

struct Compiled {
  std::unique_ptr<CompiledGraph> cg;
  std::vector<std::vector<float>> outputs;
};

// Compiles `b`, runs it on `input` into outputs of the given sizes.
Compiled CompileAndRun(GraphBuilder& b, const std::vector<float>& input,
                       const std::vector<int64_t>& output_sizes) {
  Compiled c;
  ConstantTable consts;
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  if (!cg.ok()) return c;
  c.cg = std::move(*cg);
  std::vector<void*> outs;
  for (int64_t n : output_sizes) {
    c.outputs.emplace_back(n, -1.0f);
    outs.push_back(c.outputs.back().data());
  }
  const void* ins[] = {input.data()};
  const absl::Status run = Execute(*c.cg, ins, outs);
  EXPECT_TRUE(run.ok()) << run << "\n" << DumpCompiledGraph(*c.cg);
  return c;
}

int StepsOf(const CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const CompiledStep& s : cg.steps) n += cg.graph.nodes[s.node].target == target;
  return n;
}

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(ComposeViews, PermuteThenSlicesIsOneStridedRead) {
  // Longformer's window of a permuted score tensor.
  GraphBuilder b;
  const int x = b.Input({2, 8, 3, 9});
  const int p = b.Call("aten.permute.default", {Ref(x), IntList({0, 2, 1, 3})}, "p");
  const int s1 = b.Call("aten.slice.Tensor", {Ref(p), Int(2), Int(0), Int(4)}, "s1");
  const int s2 = b.Call("aten.slice.Tensor", {Ref(s1), Int(3), Int(-5), None()}, "s2");
  b.Output(b.Call("aten.relu.default", {Ref(s2)}, "relu"));
  const std::vector<float> in = Iota(2 * 8 * 3 * 9);
  Compiled c = CompileAndRun(b, in, {2 * 3 * 4 * 5});
  ASSERT_NE(c.cg, nullptr);
  EXPECT_EQ(c.cg->steps.size(), 2u) << DumpCompiledGraph(*c.cg);
  EXPECT_EQ(StepsOf(*c.cg, "aten.as_strided.default"), 1) << DumpCompiledGraph(*c.cg);
  EXPECT_EQ(StepsOf(*c.cg, "aten.permute.default"), 0) << DumpCompiledGraph(*c.cg);
  int i = 0;
  for (int n = 0; n < 2; ++n)
    for (int h = 0; h < 3; ++h)
      for (int l = 0; l < 4; ++l)
        for (int e = 4; e < 9; ++e, ++i) {
          ASSERT_EQ(c.outputs[0][i], in[((n * 8 + l) * 3 + h) * 9 + e]) << i;
        }
}

TEST(ComposeViews, SingleCopyKeepsItsOwnKernel) {
  GraphBuilder b;
  const int x = b.Input({4, 6});
  const int v = b.Call("aten.view.default", {Ref(x), IntList({2, 2, 6})}, "v");
  b.Output(b.Call("aten.permute.default", {Ref(v), IntList({2, 1, 0})}, "p"));
  Compiled c = CompileAndRun(b, Iota(24), {24});
  ASSERT_NE(c.cg, nullptr);
  EXPECT_EQ(StepsOf(*c.cg, "aten.permute.default"), 1) << DumpCompiledGraph(*c.cg);
  EXPECT_EQ(StepsOf(*c.cg, "aten.as_strided.default"), 0) << DumpCompiledGraph(*c.cg);
}

TEST(ComposeViews, ReshapeThatNeedsACopyEndsTheChain) {
  // Merging dims the permute left apart cannot be strides over x: the
  // permute is materialized, and the slice reads it.
  GraphBuilder b;
  const int x = b.Input({3, 4, 5});
  const int p = b.Call("aten.permute.default", {Ref(x), IntList({1, 0, 2})}, "p");
  const int v = b.Call("aten.view.default", {Ref(p), IntList({12, 5})}, "v");
  b.Output(b.Call("aten.slice.Tensor", {Ref(v), Int(0), Int(1), Int(11), Int(3)}, "s"));
  const std::vector<float> in = Iota(60);
  Compiled c = CompileAndRun(b, in, {4 * 5});
  ASSERT_NE(c.cg, nullptr);
  EXPECT_EQ(StepsOf(*c.cg, "aten.permute.default"), 1) << DumpCompiledGraph(*c.cg);
  for (int r = 0; r < 4; ++r) {
    const int row = 1 + 3 * r, j = row / 3, i = row % 3;  // p[j][i] = x[i][j]
    for (int e = 0; e < 5; ++e) ASSERT_EQ(c.outputs[0][r * 5 + e], in[(i * 4 + j) * 5 + e]);
  }
}

TEST(ComposeViews, IntermediateWithAnotherReaderStaysForIt) {
  GraphBuilder b;
  const int x = b.Input({4, 5, 6});
  const int p = b.Call("aten.permute.default", {Ref(x), IntList({2, 0, 1})}, "p");
  const int s = b.Call("aten.select.int", {Ref(p), Int(1), Int(-1)}, "s");
  b.Output(b.Call("aten.expand.default", {Ref(s), IntList({2, 6, 5})}, "e"));
  b.Output(p);
  const std::vector<float> in = Iota(120);
  Compiled c = CompileAndRun(b, in, {60, 120});
  ASSERT_NE(c.cg, nullptr);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 6; ++k)
      for (int j = 0; j < 5; ++j) {
        ASSERT_EQ(c.outputs[0][(r * 6 + k) * 5 + j], in[(3 * 5 + j) * 6 + k]);
      }
  for (int k = 0; k < 6; ++k)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j) {
        ASSERT_EQ(c.outputs[1][(k * 4 + i) * 5 + j], in[(i * 5 + j) * 6 + k]);
      }
}

TEST(ComposeViews, RandomChainsGiveTheElementsOfTheOpsOneByOne) {
  std::mt19937 rng(7);
  int composed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<int64_t> shape = {
        std::uniform_int_distribution<int64_t>(1, 4)(rng),
        std::uniform_int_distribution<int64_t>(2, 5)(rng),
        std::uniform_int_distribution<int64_t>(2, 6)(rng)};
    Dense ref{shape, Iota(Count(shape))};
    GraphBuilder b;
    int node = b.Input(shape);
    const int length = std::uniform_int_distribution<int>(2, 6)(rng);
    std::string chain;
    int copies = 0;
    // Another reader of one link, sometimes: that link stays computed.
    const int kept = std::uniform_int_distribution<int>(-2, length - 2)(rng);
    Dense kept_ref;
    for (int k = 0; k < length; ++k) {
      const Op op = RandomOp(ref.shape, rng);
      std::vector<kiln::v1::Argument> args = {Ref(node)};
      args.insert(args.end(), op.literals.begin(), op.literals.end());
      node = b.Call(op.target, args, "op" + std::to_string(k));
      ref = op.apply(ref, op);
      chain += " " + op.target;
      copies += op.target != "aten.view.default" && op.target != "aten.unsqueeze.default";
      if (k == kept) {
        b.Output(node);
        kept_ref = ref;
      }
    }
    b.Output(node);
    std::vector<int64_t> sizes;
    if (kept >= 0) sizes.push_back(static_cast<int64_t>(kept_ref.data.size()));
    sizes.push_back(static_cast<int64_t>(ref.data.size()));
    Compiled c = CompileAndRun(b, Iota(Count(shape)), sizes);
    ASSERT_NE(c.cg, nullptr) << chain;
    composed += static_cast<int>(c.cg->steps.size()) < copies;
    if (kept >= 0) {
      ASSERT_EQ(c.outputs[0], kept_ref.data) << "trial " << trial << ":" << chain;
    }
    ASSERT_EQ(c.outputs.back(), ref.data) << "trial " << trial << ":" << chain << "\n"
                                          << DumpCompiledGraph(*c.cg);
  }
  // Chains do compose: fewer steps than copying ops (else the test would
  // check nothing of the pass).
  EXPECT_GT(composed, 100);
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

TEST(ComposeViews, BmmReadsPermutedOperandsWhereTheyLie) {
  constexpr int64_t kHeads = 3, kLen = 20, kDim = 16;
  GraphBuilder b;
  const int q = b.Input({kLen, kHeads * kDim});
  const int k = b.Input({kLen, kHeads * kDim});
  const int qv = b.Call("aten.view.default", {Ref(q), IntList({kLen, kHeads, kDim})});
  const int qp = b.Call("aten.permute.default", {Ref(qv), IntList({1, 0, 2})});
  const int kv = b.Call("aten.view.default", {Ref(k), IntList({kLen, kHeads, kDim})});
  const int kp = b.Call("aten.permute.default", {Ref(kv), IntList({1, 2, 0})});
  b.Output(b.Call("aten.bmm.default", {Ref(qp), Ref(kp)}));
  const std::vector<float> qs = kiln::testing::UniformFloats(kLen * kHeads * kDim, -1, 1, 1);
  const std::vector<float> ks = kiln::testing::UniformFloats(kLen * kHeads * kDim, -1, 1, 2);
  ConstantTable consts;
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  // One step: the product, reading both inputs in place.
  EXPECT_EQ(StepsOf(**cg, "kiln.bmm"), 1) << DumpCompiledGraph(**cg);
  EXPECT_EQ((*cg)->steps.size(), 1u) << DumpCompiledGraph(**cg);
  std::vector<float> out(kHeads * kLen * kLen, -1.f);
  const void* ins[] = {qs.data(), ks.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  const std::vector<double> want = testing::ReferenceHeadScores(qs, ks, kHeads, kLen, kDim);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-4) << i;
}

TEST(ComposeViews, BmmOfASlicedWindowReadsItAtItsOffset) {
  // Blocks 1..2 of 4 along the rows, as a block-sparse attention gathers.
  GraphBuilder b;
  const int x = b.Input({2, 8, 5});
  const int y = b.Input({2, 5, 3});
  const int rows = b.Call("aten.slice.Tensor", {Ref(x), Int(1), Int(2), Int(6)});
  b.Output(b.Call("aten.bmm.default", {Ref(rows), Ref(y)}));
  const std::vector<float> xs = Iota(2 * 8 * 5);
  std::vector<float> ys(2 * 5 * 3);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i % 7) - 3.f;
  ConstantTable consts;
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(StepsOf(**cg, "kiln.bmm"), 1) << DumpCompiledGraph(**cg);
  EXPECT_EQ(StepsOf(**cg, "aten.slice.Tensor"), 0) << DumpCompiledGraph(**cg);
  std::vector<float> out(2 * 4 * 3, -1.f);
  const void* ins[] = {xs.data(), ys.data()};
  void* outs[] = {out.data()};
  ASSERT_TRUE(Execute(**cg, ins, outs).ok());
  for (int bi = 0; bi < 2; ++bi)
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 3; ++c) {
        float sum = 0;
        for (int e = 0; e < 5; ++e) sum += xs[(bi * 8 + r + 2) * 5 + e] * ys[(bi * 5 + e) * 3 + c];
        ASSERT_EQ(out[(bi * 4 + r) * 3 + c], sum) << bi << "," << r << "," << c;
      }
}

TEST(ComposeViews, BmmOfABroadcastOperandKeepsItsCopy) {
  // expand gives stride 0: the copy stays, the product reads it dense.
  GraphBuilder b;
  const int x = b.Input({3, 4, 5});
  const int w = b.Input({1, 5, 2});
  const int wb = b.Call("aten.expand.default", {Ref(w), IntList({3, 5, 2})});
  b.Output(b.Call("aten.bmm.default", {Ref(x), Ref(wb)}));
  ConstantTable consts;
  auto cg = Compile(*GraphFromProto(b.graph()), consts.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_EQ(StepsOf(**cg, "aten.bmm.default"), 1) << DumpCompiledGraph(**cg);
  EXPECT_EQ(StepsOf(**cg, "aten.expand.default"), 1) << DumpCompiledGraph(**cg);
}

}  // namespace
}  // namespace kiln::runtime
