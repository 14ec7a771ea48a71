// A dynamic-shape template for the tests of shape specialization (the
// function in runtime/ir and the daemon's Specialize RPC): one symbolic
// input dimension and one SymbolicSize node.
#pragma once

#include "kiln/v1/kiln.pb.h"
#include "tests/testing/proto_graph.h"

namespace kiln::testing {

// x: f32[-1, 4]; n: size; y = view(relu(x), [n, 2, 2])  (n == rows of x)
struct DynamicTemplate {
  GraphBuilder b;
  int x, n, y;
  DynamicTemplate() {
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

}  // namespace kiln::testing
