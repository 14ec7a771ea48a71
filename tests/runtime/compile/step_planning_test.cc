// Step planning (compile/step_planning.h) through Compile + Execute: the
// waves steps run in and the memory they share, convolutions that write
// over their residual, and cats whose inputs are computed in place.
#include "runtime/compile/step_planning.h"

#include "runtime/compile/compiler.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <atomic>
#include <map>
#include <optional>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ops/registry.h"
#include "runtime/util/sha256.h"
#include "tests/testing/constant_table.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::UniformFloats;

using kiln::testing::Bool;
using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::IntList;
using kiln::testing::Ref;
using kiln::testing::RefList;

// Constant bytes by hash, as the daemon's constant store holds them.
using Constants = kiln::testing::ConstantTable;

// ---- Branches: waves of independent steps and their memory ---------------

// A test graph and the constants it refers to.
struct BuiltGraph {
  Constants constants;
  kiln::v1::Graph graph;
};

// relu(conv(in)) with a k x k kernel (padding k / 2), its random weight and
// bias from `seed` added to f's constants.
int AddConvRelu(GraphBuilder& b, BuiltGraph& f, int in, int64_t cin, int64_t cout, int64_t k,
                int seed) {
  std::vector<float> w = UniformFloats(cout * cin * k * k, -1.f, 1.f, 2 * seed);
  std::vector<float> bias = UniformFloats(cout, -1.f, 1.f, 2 * seed + 1);
  f.constants.Add(w);
  f.constants.Add(bias);
  int wn = b.Constant(w, {cout, cin, k, k});
  int bn = b.Constant(bias, {cout});
  int c = b.Call("aten.convolution.default",
                 {Ref(in), Ref(wn), Ref(bn), IntList({1, 1}), IntList({k / 2, k / 2}),
                  IntList({1, 1}), Bool(false), IntList({0, 0}), Int(1)});
  return b.Call("aten.relu.default", {Ref(c)});
}

// Two squeezenet fire modules: squeeze 1x1 conv + relu, then expand 1x1 and
// 3x3 convs + relu side by side, concatenated; a view of the first module's
// output is a graph output too (an alias living to the end).

BuiltGraph BuildFireGraph() {
  BuiltGraph f;
  GraphBuilder b;
  int x = b.Input({1, 8, 12, 12});
  int seed = 1;
  auto conv = [&](int in, int64_t cin, int64_t cout, int64_t k) {
    return AddConvRelu(b, f, in, cin, cout, k, seed++);
  };
  auto fire = [&](int in, int64_t cin) {
    int squeeze = conv(in, cin, 4, 1);
    int e1 = conv(squeeze, 4, 8, 1);
    int e3 = conv(squeeze, 4, 8, 3);
    return b.Call("aten.cat.default", {RefList({e1, e3}), Int(1)});
  };
  int f1 = fire(x, 8);
  int f2 = fire(f1, 16);
  b.Output(f2);
  b.Output(b.Call("aten.view.default", {Ref(f1), IntList({16, 144})}));
  f.graph = b.graph();
  return f;
}

absl::StatusOr<std::unique_ptr<CompiledGraph>> CompileWith(BuiltGraph& f, BranchMode branches) {
  auto ir = GraphFromProto(f.graph);
  if (!ir.ok()) return ir.status();
  ir->options.branches = branches;
  return Compile(*std::move(ir), f.constants.Resolver());
}

// Bytes [begin, end) in a run's arena.
struct Interval {
  int64_t begin, end;
  bool Overlaps(const Interval& o) const { return begin < o.end && o.begin < end; }
};

bool IsJoinedCat(const CompiledGraph& cg, int node) {
  return std::find(cg.joined_cats.begin(), cg.joined_cats.end(), node) != cg.joined_cats.end();
}

// The tensor argument `node` may write its output over (ops.def:
// Overwrites), or null.
const ValueRef* OverwrittenInput(const Node& node) {
  const OpDef* op = node.kind == Node::Kind::kOp ? OpOf(node) : nullptr;
  const int pos = op != nullptr ? op->traits.overwrites : -1;
  if (pos < 0 || static_cast<size_t>(pos) >= node.args.size() ||
      node.args[pos].kind != Arg::Kind::kTensor) {
    return nullptr;
  }
  return &node.args[pos].tensor;
}

// The step output (or joined cat) whose bytes `ref` reads (through
// aliases), or none for inputs and constants.
std::optional<ValueRef> Origin(const CompiledGraph& cg, const std::vector<int>& step_of,
                               ValueRef ref) {
  while (step_of[ref.node] < 0 && !IsJoinedCat(cg, ref.node)) {
    const Node& node = cg.graph.nodes[ref.node];
    if (node.kind != Node::Kind::kOp) return std::nullopt;
    ref = TensorInputsOf(node)[0];  // an alias of its only input
  }
  return ref;
}

// Checks, independently of the planner, that no two values (or kernel
// scratch regions) live in the same wave share a byte: a value lives from
// the wave that produces it to the last wave reading it (graph outputs: to
// the end). Outputs computed in the caller's memory take no arena bytes.
void ExpectNoSharedBytesWithinAWave(const CompiledGraph& cg) {
  const int num_waves = static_cast<int>(cg.waves.size());
  std::vector<int> step_of(cg.graph.nodes.size(), -1), wave_of_step(cg.steps.size());
  for (int w = 0; w < num_waves; ++w) {
    for (int s = cg.waves[w].begin; s < cg.waves[w].end; ++s) {
      step_of[cg.steps[s].node] = s;
      wave_of_step[s] = w;
    }
  }
  struct Live {
    ValueRef value;
    Interval bytes;
    int first, last;
  };
  std::vector<Live> live;
  auto find = [&](ValueRef v) -> Live* {
    for (Live& l : live) {
      if (l.value == v) return &l;
    }
    return nullptr;
  };
  for (int s = 0; s < static_cast<int>(cg.steps.size()); ++s) {
    const Node& node = cg.graph.nodes[cg.steps[s].node];
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      const ValueSlot& slot = cg.slots[cg.steps[s].node][o];
      if (slot.kind == ValueSlot::Kind::kOutput) {  // the caller's memory, not the arena
        ASSERT_LT(slot.index, static_cast<int>(cg.graph.outputs.size()));
        continue;
      }
      ASSERT_EQ(slot.kind, ValueSlot::Kind::kArena);
      const int64_t size = std::max<int64_t>(node.outputs[o].ByteSize(), 1);
      live.push_back({ValueRef{cg.steps[s].node, o}, {slot.offset, slot.offset + size},
                      wave_of_step[s], wave_of_step[s]});
    }
  }
  // A joined cat's bytes are taken from its first input's wave on.
  for (int cat : cg.joined_cats) {
    const ValueSlot& slot = cg.slots[cat][0];
    ASSERT_EQ(slot.kind, ValueSlot::Kind::kArena);
    int first = num_waves;
    for (const ValueRef& in : TensorInputsOf(cg.graph.nodes[cat])) {
      auto v = Origin(cg, step_of, in);
      ASSERT_TRUE(v.has_value());
      Live* l = find(*v);
      ASSERT_NE(l, nullptr);
      first = std::min(first, l->first);
    }
    live.push_back({ValueRef{cat, 0},
                    {slot.offset, slot.offset + cg.graph.nodes[cat].outputs[0].ByteSize()},
                    first, first});
  }
  for (int s = 0; s < static_cast<int>(cg.steps.size()); ++s) {
    for (const ValueRef& in : cg.steps[s].inputs) {
      if (auto v = Origin(cg, step_of, in)) {
        if (cg.slots[v->node][v->output].kind == ValueSlot::Kind::kOutput) continue;
        Live* l = find(*v);
        ASSERT_NE(l, nullptr);
        ASSERT_LT(l->first, wave_of_step[s]) << "a step reads a value of its own wave";
        l->last = std::max(l->last, wave_of_step[s]);
      }
    }
  }
  // The cat reads its inputs when its reader runs: they hold its bytes.
  for (int cat : cg.joined_cats) {
    const Live* joined = find(ValueRef{cat, 0});
    for (const ValueRef& in : TensorInputsOf(cg.graph.nodes[cat])) {
      find(*Origin(cg, step_of, in))->last = joined->last;
    }
  }
  for (const ValueRef& out : cg.graph.outputs) {
    if (auto v = Origin(cg, step_of, out)) {
      if (Live* l = find(*v)) l->last = num_waves;
    }
  }
  // The one sharing allowed: an op writing its output over the input it
  // overwrites (ops.def: Overwrites; plan/in_place.h), in that input's
  // last wave.
  auto in_place = [&](const Live& overwritten, const Live& out) {
    const ValueRef* input = OverwrittenInput(cg.graph.nodes[out.value.node]);
    if (input == nullptr) return false;
    const auto origin = Origin(cg, step_of, *input);
    return origin && *origin == overwritten.value && overwritten.last == out.first &&
           overwritten.bytes.begin == out.bytes.begin;
  };
  // The other: a joined cat's input at its place in the cat's bytes.
  auto joined_in = [&](const Live& piece, const Live& cat) {
    if (!IsJoinedCat(cg, cat.value.node)) return false;
    int64_t offset = cat.bytes.begin;
    for (const ValueRef& in : TensorInputsOf(cg.graph.nodes[cat.value.node])) {
      if (Origin(cg, step_of, in) == piece.value) return piece.bytes.begin == offset;
      offset += cg.graph.MetaOf(in).ByteSize();
    }
    return false;
  };
  for (size_t a = 0; a < live.size(); ++a) {
    for (size_t b = a + 1; b < live.size(); ++b) {
      const bool same_time = live[a].first <= live[b].last && live[b].first <= live[a].last;
      if (in_place(live[a], live[b]) || in_place(live[b], live[a])) continue;
      if (joined_in(live[a], live[b]) || joined_in(live[b], live[a])) continue;
      EXPECT_FALSE(same_time && live[a].bytes.Overlaps(live[b].bytes))
          << "node " << live[a].value.node << " and node " << live[b].value.node;
    }
  }
  // Scratch follows the planned values; steps of one wave get their own.
  for (const Wave& w : cg.waves) {
    for (int s = w.begin; s < w.end; ++s) {
      const Interval mine{cg.arena_bytes + cg.steps[s].scratch_offset,
                          cg.arena_bytes + cg.steps[s].scratch_offset +
                              static_cast<int64_t>(cg.steps[s].kernel->ScratchBytes())};
      EXPECT_LE(mine.end, cg.TotalArenaBytes());
      for (int t = s + 1; t < w.end; ++t) {
        const Interval theirs{cg.arena_bytes + cg.steps[t].scratch_offset,
                              cg.arena_bytes + cg.steps[t].scratch_offset +
                                  static_cast<int64_t>(cg.steps[t].kernel->ScratchBytes())};
        EXPECT_FALSE(mine.Overlaps(theirs)) << "steps " << s << " and " << t;
      }
    }
  }
}

TEST(StepPlanning, WithoutBranchesEveryWaveIsOneStepInGraphOrder) {
  BuiltGraph f = BuildFireGraph();
  auto cg = CompileWith(f, BranchMode::kOff);
  ASSERT_TRUE(cg.ok()) << cg.status();
  ASSERT_EQ((*cg)->waves.size(), (*cg)->steps.size());
  for (size_t s = 1; s < (*cg)->steps.size(); ++s) {
    EXPECT_LT((*cg)->steps[s - 1].node, (*cg)->steps[s].node);
  }
  ExpectNoSharedBytesWithinAWave(**cg);
}

TEST(StepPlanning, BranchesPutExpandConvolutionsInOneWaveWithDisjointMemory) {
  BuiltGraph f = BuildFireGraph();
  for (BranchMode mode : {BranchMode::kAuto, BranchMode::kOn}) {
    auto cg = CompileWith(f, mode);
    ASSERT_TRUE(cg.ok()) << cg.status();
    int shared = 0;
    for (const Wave& w : (*cg)->waves) shared += w.size() > 1;
    // One per fire module at least (layout permutes may make more).
    EXPECT_GE(shared, 2) << DumpCompiledGraph(**cg);
    ExpectNoSharedBytesWithinAWave(**cg);
    EXPECT_NE(DumpCompiledGraph(**cg).find("|| wave"), std::string::npos);
  }
}

TEST(StepPlanning, BranchesGiveTheSameResultsAsGraphOrder) {
  BuiltGraph f = BuildFireGraph();
  auto serial = CompileWith(f, BranchMode::kOff);
  auto waves = CompileWith(f, BranchMode::kOn);
  ASSERT_TRUE(serial.ok() && waves.ok());
  const std::vector<float> x = UniformFloats(8 * 12 * 12, -1.f, 1.f, 99);
  auto run = [&](const CompiledGraph& g) {
    std::vector<float> out0(g.output_metas[0].NumElements()), out1(g.output_metas[1].NumElements());
    const void* inputs[] = {x.data()};
    void* outputs[] = {out0.data(), out1.data()};
    for (int i = 0; i < 8; ++i) EXPECT_TRUE(Execute(g, inputs, outputs).ok());
    return std::make_pair(out0, out1);
  };
  EXPECT_EQ(run(**serial), run(**waves));
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

// ---- In place: a convolution's output over its residual -------------------

// A stem convolution, two resnet basic blocks (y = relu(conv(relu(conv(x)))
// + x)) and a last convolution. With `stem_read_late`, a second output
// adds the stem to the last block's output, so the stem is read after the
// first block and that block cannot overwrite it.
BuiltGraph BuildResidualGraph(bool stem_read_late) {
  BuiltGraph f;
  GraphBuilder b;
  int x = b.Input({2, 8, 10, 10});
  int seed = 11;
  auto conv = [&](int in) {
    std::vector<float> w = UniformFloats(8 * 8 * 9, -1.f, 1.f, seed++);
    std::vector<float> bias = UniformFloats(8, -1.f, 1.f, seed++);
    for (float& v : w) v *= 0.2f;
    f.constants.Add(w);
    f.constants.Add(bias);
    return b.Call("aten.convolution.default",
                  {Ref(in), Ref(b.Constant(w, {8, 8, 3, 3})), Ref(b.Constant(bias, {8})),
                   IntList({1, 1}), IntList({1, 1}), IntList({1, 1}), Bool(false),
                   IntList({0, 0}), Int(1)});
  };
  auto block = [&](int in) {
    int h = b.Call("aten.relu.default", {Ref(conv(in))});
    int sum = b.Call("aten.add.Tensor", {Ref(conv(h)), Ref(in)});
    return b.Call("aten.relu.default", {Ref(sum)});
  };
  int stem = b.Call("aten.relu.default", {Ref(conv(x))});
  int y2 = block(block(stem));
  b.Output(conv(y2));
  if (stem_read_late) b.Output(b.Call("aten.add.Tensor", {Ref(stem), Ref(y2)}));
  f.graph = b.graph();
  return f;
}

// Per step of op `target` with an input it may overwrite: whether its
// output lives in that input's bytes.
std::vector<bool> WritesOverItsInput(const CompiledGraph& cg,
                                     std::string_view target = "kiln.conv2d") {
  std::vector<bool> same;
  for (const CompiledStep& step : cg.steps) {
    const Node& node = cg.graph.nodes[step.node];
    if (node.target != target) continue;
    const ValueRef* r = OverwrittenInput(node);
    if (r == nullptr) continue;
    const ValueSlot& out = cg.slots[step.node][0];
    const ValueSlot& in = cg.slots[r->node][r->output];
    same.push_back(out.kind == in.kind && out.index == in.index && out.offset == in.offset);
  }
  return same;
}

TEST(StepPlanning, ConvolutionWritesOverAResidualNothingReadsAfterIt) {
  BuiltGraph shared = BuildResidualGraph(false), read_late = BuildResidualGraph(true);
  for (BranchMode mode : {BranchMode::kOff, BranchMode::kOn}) {
    auto in_place = CompileWith(shared, mode);
    auto separate = CompileWith(read_late, mode);
    ASSERT_TRUE(in_place.ok()) << in_place.status();
    ASSERT_TRUE(separate.ok()) << separate.status();
    ExpectNoSharedBytesWithinAWave(**in_place);
    ExpectNoSharedBytesWithinAWave(**separate);
    EXPECT_EQ(WritesOverItsInput(**in_place), std::vector<bool>({true, true}))
        << DumpCompiledGraph(**in_place);
    EXPECT_EQ(WritesOverItsInput(**separate), std::vector<bool>({false, true}))
        << DumpCompiledGraph(**separate);

    // The same answer either way, run after run (a residual overwritten
    // too early would change the second block's result).
    const std::vector<float> x = UniformFloats(2 * 8 * 10 * 10, -1.f, 1.f, 5);
    std::vector<float> a(x.size()), b(x.size()), late(x.size());
    const void* inputs[] = {x.data()};
    void* out_a[] = {a.data()};
    void* out_b[] = {b.data(), late.data()};
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(Execute(**in_place, inputs, out_a).ok());
      ASSERT_TRUE(Execute(**separate, inputs, out_b).ok());
      EXPECT_EQ(a, b);
    }
  }
}

// ---- In place: slice_scatter over its self ---------------------------------

// relu(x) with two column windows replaced in turn (as a functionalized
// `t[:, a:b] = ...` does), then exp. With `base_read_late`, a second
// output adds relu(x) to the result, so the first scatter must not
// overwrite it.
kiln::v1::Graph BuildScatterGraph(bool base_read_late) {
  GraphBuilder b;
  int x = b.Input({6, 40});
  int y = b.Input({6, 8});
  int base = b.Call("aten.relu.default", {Ref(x)});
  int src1 = b.Call("aten.neg.default", {Ref(y)});
  int s1 = b.Call("aten.slice_scatter.default", {Ref(base), Ref(src1), Int(1), Int(4), Int(12),
                                                 Int(1)});
  int src2 = b.Call("aten.sigmoid.default", {Ref(y)});
  int s2 = b.Call("aten.slice_scatter.default", {Ref(s1), Ref(src2), Int(1), Int(20), Int(36),
                                                 Int(2)});
  b.Output(b.Call("aten.exp.default", {Ref(s2)}));
  if (base_read_late) b.Output(b.Call("aten.add.Tensor", {Ref(base), Ref(s2)}));
  return b.graph();
}

// The graph's outputs, computed element by element in double.
std::vector<std::vector<double>> ScatterReference(const std::vector<float>& x,
                                                  const std::vector<float>& y) {
  std::vector<double> base(6 * 40), s(6 * 40);
  for (size_t i = 0; i < base.size(); ++i) base[i] = std::max(0.f, x[i]);
  s = base;
  for (int r = 0; r < 6; ++r) {
    for (int c = 0; c < 8; ++c) {
      s[r * 40 + 4 + c] = -y[r * 8 + c];
      s[r * 40 + 20 + 2 * c] = 1.0 / (1.0 + std::exp(-double{y[r * 8 + c]}));
    }
  }
  std::vector<double> e(s.size()), sum(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    e[i] = std::exp(s[i]);
    sum[i] = base[i] + s[i];
  }
  return {e, sum};
}

TEST(StepPlanning, SliceScatterWritesOverASelfNothingReadsAfterIt) {
  const std::vector<float> x = UniformFloats(6 * 40, -1.f, 1.f, 21);
  const std::vector<float> y = UniformFloats(6 * 8, -1.f, 1.f, 22);
  const auto want = ScatterReference(x, y);
  for (bool late : {false, true}) {
    for (BranchMode mode : {BranchMode::kOff, BranchMode::kOn}) {
      auto ir = GraphFromProto(BuildScatterGraph(late));
      ASSERT_TRUE(ir.ok()) << ir.status();
      ir->options.branches = mode;
      Constants none;
      auto cg = Compile(*std::move(ir), none.Resolver());
      ASSERT_TRUE(cg.ok()) << cg.status();
      ExpectNoSharedBytesWithinAWave(**cg);
      // relu(x) is overwritten only when nothing reads it afterwards; the
      // second scatter's self, the first's output, always is.
      EXPECT_EQ(WritesOverItsInput(**cg, "aten.slice_scatter.default"),
                std::vector<bool>({!late, true}))
          << DumpCompiledGraph(**cg);
      std::vector<float> e(6 * 40), sum(6 * 40);
      const std::vector<const void*> inputs = {x.data(), y.data()};
      std::vector<void*> outputs = {e.data()};
      if (late) outputs.push_back(sum.data());
      for (int run = 0; run < 2; ++run) {
        const absl::Status run_status = Execute(**cg, inputs, outputs);
        ASSERT_TRUE(run_status.ok()) << run_status;
        for (size_t i = 0; i < e.size(); ++i) {
          EXPECT_NEAR(e[i], want[0][i], 1e-5 * std::abs(want[0][i])) << i;
          if (late) {
            EXPECT_NEAR(sum[i], want[1][i], 1e-5) << i;
          }
        }
      }
    }
  }
}

// A cache updated at given rows (index_put, as a functionalized
// `cache[pos] = new` is), then read: the update writes into the cache's
// bytes, and gives the answer of a copy.
TEST(StepPlanning, IndexPutWritesOverItsSelfInPlace) {
  GraphBuilder b;
  int x = b.Input({8, 16});
  int pos = b.Input({3}, kiln::v1::INT64);
  int rows = b.Input({3, 16});
  int cache = b.Call("aten.relu.default", {Ref(x)});
  int put = b.Call("aten.index_put.default",
                   {Ref(cache), RefList({pos}), Ref(rows), Bool(false)});
  b.Output(b.Call("aten.neg.default", {Ref(put)}));
  auto ir = GraphFromProto(b.graph());
  ASSERT_TRUE(ir.ok()) << ir.status();
  Constants none;
  auto cg = Compile(*std::move(ir), none.Resolver());
  ASSERT_TRUE(cg.ok()) << cg.status();
  ExpectNoSharedBytesWithinAWave(**cg);
  EXPECT_EQ(WritesOverItsInput(**cg, "aten.index_put.default"), std::vector<bool>({true}))
      << DumpCompiledGraph(**cg);
  const std::vector<float> xs = UniformFloats(8 * 16, -1.f, 1.f, 31);
  const std::vector<float> new_rows = UniformFloats(3 * 16, -1.f, 1.f, 32);
  const std::vector<int64_t> at = {6, 1, -3};  // -3: row 5
  std::vector<float> out(8 * 16);
  const void* inputs[] = {xs.data(), at.data(), new_rows.data()};
  void* outputs[] = {out.data()};
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
    for (int r = 0; r < 8; ++r) {
      const int k = r == 6 ? 0 : r == 1 ? 1 : r == 5 ? 2 : -1;
      for (int c = 0; c < 16; ++c) {
        const float want = k >= 0 ? -new_rows[k * 16 + c] : -std::max(0.f, xs[r * 16 + c]);
        EXPECT_EQ(out[r * 16 + c], want) << r << "," << c;
      }
    }
  }
}

// ---- An output laid over an input (Graph::outputs_over_inputs) ------------

// A cache input updated at given rows (index_put, as a functionalized
// static KV cache's index_copy_ is), output 0 the updated cache, declared
// over input 0; output 1 reads the update (as attention does). With
// `read_original`, output 2 reads the cache as it came in.
kiln::v1::Graph BuildCacheUpdate(bool read_original) {
  GraphBuilder b;
  int cache = b.Input({8, 16});
  int pos = b.Input({3}, kiln::v1::INT64);
  int rows = b.Input({3, 16});
  int put = b.Call("aten.index_put.default", {Ref(cache), RefList({pos}), Ref(rows), Bool(false)});
  b.Output(put);
  b.Output(b.Call("aten.neg.default", {Ref(put)}));
  if (read_original) b.Output(b.Call("aten.relu.default", {Ref(cache)}));
  kiln::v1::OutputOverInput* pair = b.graph().add_outputs_over_inputs();
  pair->set_output(0);
  pair->set_input(0);
  return b.graph();
}

bool ComputedInOutput(const CompiledGraph& cg, const std::string& target) {
  for (const CompiledStep& step : cg.steps) {
    if (cg.graph.nodes[step.node].target == target) {
      return cg.slots[step.node][0].kind == ValueSlot::Kind::kOutput;
    }
  }
  return false;
}

TEST(StepPlanning, AnOutputOverItsInputIsUpdatedThereOnlyWhenNothingElseReadsIt) {
  const std::vector<float> start = UniformFloats(8 * 16, -1.f, 1.f, 41);
  const std::vector<float> new_rows = UniformFloats(3 * 16, -1.f, 1.f, 42);
  const std::vector<int64_t> at = {6, 1, -3};  // -3: row 5
  std::vector<float> updated = start;
  for (int k = 0; k < 3; ++k) {
    const int r = k == 0 ? 6 : k == 1 ? 1 : 5;
    std::copy_n(new_rows.begin() + k * 16, 16, updated.begin() + r * 16);
  }
  for (bool read_original : {false, true}) {
    for (BranchMode mode : {BranchMode::kOff, BranchMode::kOn}) {
      auto ir = GraphFromProto(BuildCacheUpdate(read_original));
      ASSERT_TRUE(ir.ok()) << ir.status();
      ir->options.branches = mode;
      Constants none;
      auto cg = Compile(*std::move(ir), none.Resolver());
      ASSERT_TRUE(cg.ok()) << cg.status();
      // The update writes the caller's bytes during the run only when it
      // is the cache's one reader; else it is copied there after the run.
      EXPECT_EQ(ComputedInOutput(**cg, "aten.index_put.default"), !read_original)
          << DumpCompiledGraph(**cg);
      for (bool laid_over : {true, false}) {
        std::vector<float> cache = start, own(8 * 16), neg(8 * 16), relu(8 * 16);
        const void* inputs[] = {cache.data(), at.data(), new_rows.data()};
        std::vector<void*> outputs = {laid_over ? cache.data() : own.data(), neg.data()};
        if (read_original) outputs.push_back(relu.data());
        for (int run = 0; run < 2; ++run) {
          ASSERT_TRUE(Execute(**cg, inputs, outputs).ok());
          EXPECT_EQ(laid_over ? cache : own, updated);
          EXPECT_EQ(cache, laid_over ? updated : start);  // never written unless laid over
          for (size_t i = 0; i < neg.size(); ++i) {
            EXPECT_EQ(neg[i], -updated[i]) << i;
            if (read_original) {
              // The first run read the cache as it came in; the second,
              // laid over, the first's update.
              const float was = laid_over && run == 1 ? updated[i] : start[i];
              EXPECT_EQ(relu[i], std::max(0.f, was)) << i;
            }
          }
        }
      }
    }
  }
}

TEST(StepPlanning, OutputsOverInputsThatCannotBeAreRefused) {
  // Refused when the graph is read, or (metas) when it is compiled.
  auto status_of = [](const kiln::v1::Graph& g) {
    auto ir = GraphFromProto(g);
    if (!ir.ok()) return ir.status();
    Constants none;
    return Compile(*std::move(ir), none.Resolver()).status();
  };
  auto refused = [&](int output, int input, const char* why) {
    kiln::v1::Graph g = BuildCacheUpdate(false);
    g.mutable_outputs_over_inputs(0)->set_output(output);
    g.mutable_outputs_over_inputs(0)->set_input(input);
    const absl::Status s = status_of(g);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(why), absl::string_view::npos) << s;
  };
  refused(2, 0, "the graph has 2 outputs");
  refused(0, 3, "the graph has 3 inputs");
  refused(-1, 0, "the graph has 2 outputs");
  refused(0, 2, "the output is f32[8,16], the input f32[3,16]");
  kiln::v1::Graph twice = BuildCacheUpdate(false);
  *twice.add_outputs_over_inputs() = twice.outputs_over_inputs(0);
  const absl::Status s = status_of(twice);
  EXPECT_NE(s.message().find("named twice"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace kiln::runtime

namespace kiln::runtime {
namespace {

// ---- Joined cats: a cat's inputs computed straight into its output ---------

// A fire module whose cat feeds a 1x1 convolution (the graph's output).
// The expand 1x1 output may also be read after the cat (by a relu, a
// second graph output), or be a graph output itself, which the cat must
// then copy.
enum class Expand1x1 { kCatOnly, kReadLater, kGraphOutput };

BuiltGraph BuildCatGraph(Expand1x1 expand, int64_t batch = 1) {
  BuiltGraph f;
  GraphBuilder b;
  int x = b.Input({batch, 8, 12, 12});
  int seed = 1;
  auto conv = [&](int in, int64_t cin, int64_t cout, int64_t k) {
    return AddConvRelu(b, f, in, cin, cout, k, seed++);
  };
  int squeeze = conv(x, 8, 8, 1);
  int e1 = conv(squeeze, 8, 8, 1);
  int e3 = conv(squeeze, 8, 16, 3);
  int cat = b.Call("aten.cat.default", {RefList({e1, e3}), Int(1)});
  b.Output(conv(cat, 24, 8, 1));
  if (expand == Expand1x1::kReadLater) b.Output(b.Call("aten.relu.default", {Ref(e1)}));
  if (expand == Expand1x1::kGraphOutput) b.Output(e1);
  f.graph = b.graph();
  return f;
}

absl::StatusOr<std::unique_ptr<CompiledGraph>> CompileCat(BuiltGraph& f, LayoutOption layout,
                                                          BranchMode branches) {
  auto ir = GraphFromProto(f.graph);
  if (!ir.ok()) return ir.status();
  ir->options.layout = layout;
  ir->options.branches = branches;
  return Compile(*std::move(ir), f.constants.Resolver());
}

std::vector<std::vector<float>> RunOutputs(const CompiledGraph& g, const std::vector<float>& x) {
  std::vector<std::vector<float>> outs;
  std::vector<void*> out_ptrs;
  for (const TensorMeta& m : g.output_metas) outs.emplace_back(m.NumElements(), -1.0f);
  for (auto& o : outs) out_ptrs.push_back(o.data());
  const void* inputs[] = {x.data()};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Execute(g, inputs, out_ptrs).ok());
  return outs;
}

TEST(StepPlanning, CatInputsAreComputedInTheCatsBytesAtBatchOne) {
  const std::vector<float> x = UniformFloats(8 * 12 * 12, -1.f, 1.f, 7);
  auto cat_steps = [](const CompiledGraph& g) {
    int n = 0;
    for (const CompiledStep& step : g.steps) n += g.graph.nodes[step.node].target == "aten.cat.default";
    return n;
  };
  // Channels-last puts H and W before the cat's dimension: no join there.
  for (Expand1x1 expand : {Expand1x1::kCatOnly, Expand1x1::kReadLater, Expand1x1::kGraphOutput}) {
    BuiltGraph f = BuildCatGraph(expand);
    for (LayoutOption layout : {LayoutOption::kNchw, LayoutOption::kBlocked}) {
      for (BranchMode branches : {BranchMode::kOff, BranchMode::kOn}) {
        auto joined = CompileCat(f, layout, branches);
        ASSERT_EQ(setenv("KILN_JOIN_CATS", "0", 1), 0);
        auto copied = CompileCat(f, layout, branches);
        ASSERT_EQ(unsetenv("KILN_JOIN_CATS"), 0);
        ASSERT_TRUE(joined.ok() && copied.ok());
        const std::string dump = DumpCompiledGraph(**joined);
        // A graph output in the caller's memory cannot be in the cat's
        // bytes too; in the blocked layout the output is a converted copy.
        const bool expect_join = !(expand == Expand1x1::kGraphOutput && layout == LayoutOption::kNchw);
        EXPECT_EQ((*joined)->joined_cats.size(), expect_join ? 1u : 0u) << dump;
        EXPECT_EQ(dump.find("(inputs computed in place)") != std::string::npos, expect_join) << dump;
        EXPECT_EQ(cat_steps(**joined), expect_join ? 0 : 1);
        EXPECT_TRUE((*copied)->joined_cats.empty());
        EXPECT_EQ(cat_steps(**copied), 1);
        ExpectNoSharedBytesWithinAWave(**joined);
        ExpectNoSharedBytesWithinAWave(**copied);
        // Same kernels on the same bytes: the same results, bit for bit,
        // the expand output read after the cat included.
        EXPECT_EQ(RunOutputs(**joined, x), RunOutputs(**copied, x));
      }
    }
  }
}

TEST(StepPlanning, CatsOfSeveralImagesKeepTheirCopy) {
  BuiltGraph f = BuildCatGraph(Expand1x1::kCatOnly, /*batch=*/2);
  auto cg = CompileCat(f, LayoutOption::kNchw, BranchMode::kOff);
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_TRUE((*cg)->joined_cats.empty()) << DumpCompiledGraph(**cg);
}

}  // namespace
}  // namespace kiln::runtime
