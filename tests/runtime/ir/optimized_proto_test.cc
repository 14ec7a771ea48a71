// The optimized graph of an artifact: written inputs, constants, ops, dead
// nodes and unread constants dropped and references renumbered; constants
// by share key or, when they have none, with their bytes; and every
// malformed message refused with a status naming the node.
#include "runtime/ir/optimized_proto.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::GraphBuilder;
using kiln::testing::Int;
using kiln::testing::Ref;

const std::string kHash(64, 'a');
const std::string kDerived = "d:" + std::string(64, 'b');

TensorMeta F32(std::vector<int64_t> shape) { return TensorMeta{DType::kF32, std::move(shape)}; }

// As passes leave a graph: x + v -> folded (dead, its users now read
// constants the passes appended: one keyless, one derived with a key), so
// the client weight v is read by nothing; x + w -> add; add * k -> mul;
// mul - derived -> sub.
struct PassesLeft {
  Graph graph;
  std::vector<const void*> data;
  std::vector<float> v = std::vector<float>(6, 3.f), w = std::vector<float>(6, 1.f);
  std::vector<float> k = {2.f, 3.f, 4.f, 5.f, 6.f, 7.f};
  std::vector<float> d = std::vector<float>(6, 0.5f);

  PassesLeft() {
    GraphBuilder b;
    const int x = b.Input({2, 3}, "x");                                          // 0
    const int v_node = b.Constant(v, {2, 3}, "v");                               // 1
    const int folded = b.Call("aten.add.Tensor", {Ref(x), Ref(v_node)}, "folded");  // 2
    const int w_node = b.Constant(w, {2, 3}, "w");                               // 3
    const int add = b.Call("aten.add.Tensor", {Ref(x), Ref(w_node)}, "add");     // 4
    const int mul = b.Call("aten.mul.Tensor", {Ref(add), Ref(folded)}, "mul");   // 5
    b.Output(b.Call("aten.sub.Tensor", {Ref(mul), Ref(folded)}, "sub"));         // 6
    graph = *GraphFromProto(b.graph());
    data.assign(graph.nodes.size(), nullptr);
    data[1] = v.data();
    data[3] = w.data();
    for (int c : {1, 3}) graph.nodes[c].share_key = "h:" + graph.nodes[c].constant_hash;
    graph.nodes[2].dead = true;
    Node keyless;
    keyless.kind = Node::Kind::kConstant;
    keyless.name = "k";
    keyless.outputs = {F32({2, 3})};
    graph.nodes.push_back(keyless);  // 7
    data.push_back(k.data());
    Node derived = keyless;
    derived.name = "derived";
    derived.share_key = kDerived;
    graph.nodes.push_back(derived);  // 8
    data.push_back(d.data());
    graph.nodes[5].args[1].tensor = {7, 0};
    graph.nodes[6].args[1].tensor = {8, 0};
  }
};

TEST(OptimizedProto, WritesInputsConstantsOpsAndReadsThemBack) {
  PassesLeft p;
  kiln::v1::OptimizedGraph proto;
  ASSERT_TRUE(OptimizedGraphToProto(p.graph, p.data, 1 << 20, &proto));
  // x; w, k, derived; add, mul, sub (folded was dead, and v is read by
  // nothing: a compile from the artifact must not ask for it).
  ASSERT_EQ(proto.nodes_size(), 7);
  EXPECT_TRUE(proto.nodes(0).has_input());
  EXPECT_EQ(proto.nodes(1).constant().share_key(), "h:" + p.graph.nodes[3].constant_hash);
  EXPECT_EQ(proto.nodes(2).constant().share_key(), "");
  EXPECT_EQ(proto.nodes(2).constant().data().size(), 24u);
  EXPECT_EQ(proto.nodes(3).constant().share_key(), kDerived);
  EXPECT_TRUE(proto.nodes(3).constant().data().empty());
  EXPECT_EQ(proto.nodes(4).call().target(), "aten.add.Tensor");
  EXPECT_EQ(proto.nodes(4).call().args(1).node().node(), 1);  // w
  EXPECT_EQ(proto.nodes(5).call().args(1).node().node(), 2);  // the keyless one
  EXPECT_EQ(proto.nodes(6).call().args(1).node().node(), 3);  // the derived one
  EXPECT_EQ(proto.outputs(0).node(), 6);

  auto decoded = OptimizedGraphFromProto(proto);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const Graph& g = decoded->graph;
  EXPECT_EQ(g.num_inputs, 1);
  EXPECT_EQ(g.nodes[1].constant_hash, p.graph.nodes[3].constant_hash);
  EXPECT_EQ(g.nodes[3].share_key, kDerived);
  EXPECT_TRUE(g.nodes[3].constant_hash.empty());
  ASSERT_EQ(decoded->inline_constants.size(), 1u);
  EXPECT_EQ(decoded->inline_constants[0].first, 2);
  EXPECT_EQ(std::memcmp(decoded->inline_constants[0].second.bytes.get(), p.k.data(), 24), 0);
  EXPECT_EQ(g.nodes[5].target, "aten.mul.Tensor");
  EXPECT_EQ(g.nodes[5].args[0].tensor.node, 4);
}

TEST(OptimizedProto, KeylessBytesPastTheCapCannotBeDescribed) {
  PassesLeft p;
  kiln::v1::OptimizedGraph proto;
  EXPECT_FALSE(OptimizedGraphToProto(p.graph, p.data, 23, &proto));
  proto.Clear();
  EXPECT_TRUE(OptimizedGraphToProto(p.graph, p.data, 24, &proto));
}

TEST(OptimizedProto, InternalOpsAreReadButNotFromClients) {
  kiln::v1::OptimizedGraph proto;
  auto* x = proto.add_nodes();
  x->set_name("x");
  x->mutable_input()->mutable_meta()->set_dtype(kiln::v1::FLOAT32);
  x->mutable_input()->mutable_meta()->add_shape(4);
  auto* call = proto.add_nodes()->mutable_call();
  call->set_target("kiln.conv2d");
  call->add_args()->mutable_node()->set_node(0);
  proto.add_outputs()->set_node(1);
  EXPECT_TRUE(OptimizedGraphFromProto(proto).ok());

  GraphBuilder b;
  b.Output(b.Call("kiln.conv2d", {Ref(b.Input({4}))}, "fused"));
  EXPECT_EQ(GraphFromProto(b.graph()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OptimizedProto, RefusesWhatItWouldNotHaveWritten) {
  PassesLeft p;
  kiln::v1::OptimizedGraph good;
  ASSERT_TRUE(OptimizedGraphToProto(p.graph, p.data, 1 << 20, &good));
  struct Case {
    const char* what;
    std::function<void(kiln::v1::OptimizedGraph*)> damage;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"a forward reference",
       [](auto* g) { g->mutable_nodes(4)->mutable_call()->mutable_args(0)->mutable_node()->set_node(5); },
       "'add'"},
      {"an unknown op", [](auto* g) { g->mutable_nodes(5)->mutable_call()->set_target("kiln.nope"); },
       "unknown op 'kiln.nope'"},
      {"a constant after the ops", [](auto* g) { *g->add_nodes() = g->nodes(1); },
       "out of order"},
      {"a key that is no key",
       [](auto* g) { g->mutable_nodes(3)->mutable_constant()->set_share_key("d:xyz"); },
       "malformed share key"},
      {"a key and bytes",
       [](auto* g) { g->mutable_nodes(3)->mutable_constant()->set_data("1234"); }, "not both"},
      {"bytes that are not the meta's",
       [](auto* g) { g->mutable_nodes(2)->mutable_constant()->set_data("1234"); }, "inline constant"},
      {"a node of no kind", [](auto* g) { g->mutable_nodes(5)->clear_kind(); }, "no kind"},
      {"an output past the end", [](auto* g) { g->mutable_outputs(0)->set_node(7); }, "output"},
      {"no output", [](auto* g) { g->clear_outputs(); }, "no outputs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    kiln::v1::OptimizedGraph bad = good;
    c.damage(&bad);
    auto decoded = OptimizedGraphFromProto(bad);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(decoded.status().message().find(c.message), std::string::npos)
        << decoded.status();
  }
}

}  // namespace
}  // namespace kiln::runtime
