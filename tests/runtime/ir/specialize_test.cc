// Shape specialization (runtime/ir/specialize.h) of a template with one
// symbolic dimension and one symbolic size.
#include "runtime/ir/specialize.h"

#include "gtest/gtest.h"
#include "tests/testing/dynamic_template.h"
#include "tests/testing/proto_graph.h"

namespace kiln::runtime {
namespace {

using kiln::testing::F32Meta;
using kiln::testing::GraphBuilder;
using kiln::testing::Ref;
using Template = kiln::testing::DynamicTemplate;

google::protobuf::RepeatedPtrField<kiln::v1::TensorMeta> Metas(
    std::initializer_list<kiln::v1::TensorMeta> metas) {
  google::protobuf::RepeatedPtrField<kiln::v1::TensorMeta> out;
  for (const auto& m : metas) *out.Add() = m;
  return out;
}

google::protobuf::RepeatedField<int64_t> Sizes(std::initializer_list<int64_t> v) {
  return google::protobuf::RepeatedField<int64_t>(v.begin(), v.end());
}

TEST(SpecializeTest, TemplateIsDynamicAndValid) {
  Template t;
  EXPECT_TRUE(IsDynamic(t.b.graph()));
  EXPECT_TRUE(ValidateTemplate(t.b.graph()).ok());
  GraphBuilder fixed;
  fixed.Output(fixed.Call("aten.relu.default", {Ref(fixed.Input({3, 4}))}));
  EXPECT_FALSE(IsDynamic(fixed.graph()));
}

TEST(SpecializeTest, SizesBecomeValuesAndNodesMoveDown) {
  Template t;
  auto g = SpecializeGraph(t.b.graph(), Metas({F32Meta({5, 4})}), Sizes({5}));
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->nodes_size(), 3);  // the size node is gone
  EXPECT_EQ(g->nodes(0).placeholder().meta().shape(0), 5);
  EXPECT_EQ(g->nodes(1).call().args(0).node().node(), 0);
  const auto& view = g->nodes(2).call();
  EXPECT_EQ(view.args(0).node().node(), 1);
  EXPECT_EQ(view.args(1).list().items(0).int_value(), 5);
  EXPECT_EQ(g->outputs(0).node(), 2);
}

TEST(SpecializeTest, WrongInputsAreInvalidArgument) {
  Template t;
  // Wrong count of sizes, wrong rank, a fixed dimension changed.
  EXPECT_EQ(SpecializeGraph(t.b.graph(), Metas({F32Meta({5, 4})}), Sizes({})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SpecializeGraph(t.b.graph(), Metas({F32Meta({5, 4, 1})}), Sizes({5})).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto s = SpecializeGraph(t.b.graph(), Metas({F32Meta({5, 3})}), Sizes({5})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fixes it at 4"), std::string::npos) << s;
}

TEST(SpecializeTest, BadTemplatesAreRefused) {
  Template as_output;
  as_output.b.Output(as_output.n);
  EXPECT_FALSE(ValidateTemplate(as_output.b.graph()).ok());
  Template forward;
  forward.b.graph().mutable_nodes(2)->mutable_call()->mutable_args(0)->mutable_node()->set_node(3);
  EXPECT_FALSE(ValidateTemplate(forward.b.graph()).ok());
  Template bad_dim;
  bad_dim.b.graph().mutable_nodes(0)->mutable_placeholder()->mutable_meta()->set_shape(0, -2);
  EXPECT_FALSE(ValidateTemplate(bad_dim.b.graph()).ok());
}

}  // namespace
}  // namespace kiln::runtime
