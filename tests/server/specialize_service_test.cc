// The daemon's dynamic-shape path end to end: a template compiles to a
// handle that cannot run, and Specialize compiles and runs each shape.
#include "gtest/gtest.h"
#include "tests/testing/dynamic_template.h"
#include "tests/testing/proto_graph.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

using testing::F32Meta;
using Template = testing::DynamicTemplate;

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
