#include "server/specialize.h"

#include "gtest/gtest.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

using testing::F32Meta;
using testing::GraphBuilder;
using testing::Ref;

// x: f32[-1, 4]; n: size; y = view(relu(x), [n, 2, 2])  (n == rows of x)
struct Template {
  GraphBuilder b;
  int x, n, y;
  Template() {
    x = b.Input({-1, 4}, "x");
    auto* size = b.graph().add_nodes();
    size->set_name("n");
    size->mutable_size();
    n = b.graph().nodes_size() - 1;
    int r = b.Call("aten.relu.default", {Ref(x)});
    kiln::v1::Argument dims;
    *dims.mutable_list()->add_items() = Ref(n);
    dims.mutable_list()->add_items()->set_int_value(2);
    dims.mutable_list()->add_items()->set_int_value(2);
    y = b.Call("aten.view.default", {Ref(r), dims});
    b.Output(y);
  }
};

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

using SpecializeServiceTest = testing::ServiceFixture;

TEST_F(SpecializeServiceTest, TemplateSpecializesPerShapeAndRunsEach) {
  Template t;
  kiln::v1::CompileResponse tmpl;
  ASSERT_TRUE(Compile(t.b.graph(), &tmpl).ok());
  EXPECT_TRUE(tmpl.dynamic());
  // A template itself cannot run.
  grpc::Status s = Execute(tmpl.handle(), Desc(0, {2, 4}), Desc(4096, {2, 2, 2}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();

  for (int64_t rows : {2, 3, 2}) {
    grpc::ClientContext ctx;
    kiln::v1::SpecializeRequest req;
    req.set_session_id(session_);
    req.set_handle(tmpl.handle());
    *req.add_inputs() = F32Meta({rows, 4});
    req.add_sizes(rows);
    kiln::v1::CompileResponse variant;
    ASSERT_TRUE(stub_->Specialize(&ctx, req, &variant).ok());
    EXPECT_FALSE(variant.dynamic());
    ASSERT_EQ(variant.outputs_size(), 1);
    EXPECT_EQ(variant.outputs(0).shape(0), rows);
    float* in = reinterpret_cast<float*>(base_);
    for (int i = 0; i < rows * 4; ++i) in[i] = static_cast<float>(i % 3) - 1.f;
    ASSERT_TRUE(Execute(variant.handle(), Desc(0, {rows, 4}), Desc(4096, {rows, 2, 2})).ok());
    const float* out = reinterpret_cast<const float*>(base_ + 4096);
    for (int i = 0; i < rows * 4; ++i) EXPECT_EQ(out[i], std::max(0.f, in[i]));
  }
  // Specializing a handle that is not a template names the problem.
  grpc::ClientContext ctx;
  kiln::v1::SpecializeRequest req;
  req.set_session_id(session_);
  req.set_handle(CompileRelu(16));
  kiln::v1::CompileResponse resp;
  EXPECT_EQ(stub_->Specialize(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace kiln::server
