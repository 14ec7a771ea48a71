// Builds kiln.v1.Graph messages in tests, the way the client shim does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/v1/kiln.pb.h"
#include "runtime/util/sha256.h"

namespace kiln::testing {

inline kiln::v1::TensorMeta F32Meta(const std::vector<int64_t>& shape) {
  kiln::v1::TensorMeta m;
  m.set_dtype(kiln::v1::FLOAT32);
  // Unsigned: tests build metas of overflowing shapes on purpose (the
  // decoder must refuse them); the strides may wrap, never be UB.
  uint64_t stride = 1;
  std::vector<int64_t> strides(shape.size());
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = static_cast<int64_t>(stride);
    stride *= static_cast<uint64_t>(shape[i]);
  }
  for (int64_t d : shape) m.add_shape(d);
  for (int64_t s : strides) m.add_strides(s);
  return m;
}

inline kiln::v1::Argument Ref(int node, int output = 0) {
  kiln::v1::Argument a;
  a.mutable_node()->set_node(node);
  a.mutable_node()->set_output(output);
  return a;
}

inline kiln::v1::Argument Int(int64_t v) {
  kiln::v1::Argument a;
  a.set_int_value(v);
  return a;
}

inline kiln::v1::Argument Bool(bool b) {
  kiln::v1::Argument a;
  a.set_bool_value(b);
  return a;
}

inline kiln::v1::Argument Float(double f) {
  kiln::v1::Argument a;
  a.set_float_value(f);
  return a;
}

inline kiln::v1::Argument None() {
  kiln::v1::Argument a;
  a.mutable_none();
  return a;
}

inline kiln::v1::Argument IntList(const std::vector<int64_t>& v) {
  kiln::v1::Argument a;
  auto* list = a.mutable_list();
  for (int64_t x : v) list->add_items()->set_int_value(x);
  return a;
}

// A list argument of node references: a tensor list (cat's inputs).
inline kiln::v1::Argument RefList(const std::vector<int>& nodes) {
  kiln::v1::Argument a;
  for (int n : nodes) *a.mutable_list()->add_items() = Ref(n);
  return a;
}

class GraphBuilder {
 public:
  int Input(const std::vector<int64_t>& shape, const std::string& name = "") {
    auto* n = graph_.add_nodes();
    n->set_name(name.empty() ? "x" + std::to_string(graph_.nodes_size()) : name);
    *n->mutable_placeholder()->mutable_meta() = F32Meta(shape);
    return graph_.nodes_size() - 1;
  }
  // An input of another dtype (indices: INT64), dense.
  int Input(const std::vector<int64_t>& shape, kiln::v1::DType dtype) {
    const int i = Input(shape);
    graph_.mutable_nodes(i)->mutable_placeholder()->mutable_meta()->set_dtype(dtype);
    return i;
  }
  int Constant(const std::vector<float>& data, const std::vector<int64_t>& shape,
               const std::string& name = "") {
    auto* n = graph_.add_nodes();
    n->set_name(name.empty() ? "c" + std::to_string(graph_.nodes_size()) : name);
    n->mutable_constant()->set_hash(
        runtime::Sha256Hex(data.data(), data.size() * sizeof(float)));
    *n->mutable_constant()->mutable_meta() = F32Meta(shape);
    return graph_.nodes_size() - 1;
  }
  int Call(const std::string& target, const std::vector<kiln::v1::Argument>& args,
           const std::string& name = "") {
    auto* n = graph_.add_nodes();
    n->set_name(name.empty() ? "op" + std::to_string(graph_.nodes_size()) : name);
    n->mutable_call()->set_target(target);
    for (const auto& a : args) *n->mutable_call()->add_args() = a;
    return graph_.nodes_size() - 1;
  }
  void Output(int node, int output = 0) {
    auto* o = graph_.add_outputs();
    o->set_node(node);
    o->set_output(output);
  }
  kiln::v1::Graph& graph() { return graph_; }

 private:
  kiln::v1::Graph graph_;
};

}  // namespace kiln::testing
