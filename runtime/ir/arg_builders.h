// Factories for graph Args (ir/graph.h), for code that builds or rewrites
// nodes: compile passes, op tests and kernel benchmarks. One definition
// each, so a change to Arg's representation is made in one place.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ir/dtype.h"
#include "runtime/ir/graph.h"

namespace kiln::runtime {

inline Arg NoneArg() { return Arg{}; }

inline Arg TensorArg(ValueRef ref) {
  Arg a;
  a.kind = Arg::Kind::kTensor;
  a.tensor = ref;
  return a;
}

inline Arg IntArg(int64_t v) {
  Arg a;
  a.kind = Arg::Kind::kInt;
  a.i = v;
  return a;
}

inline Arg FloatArg(double v) {
  Arg a;
  a.kind = Arg::Kind::kFloat;
  a.f = v;
  return a;
}

inline Arg BoolArg(bool v) {
  Arg a;
  a.kind = Arg::Kind::kBool;
  a.b = v;
  return a;
}

inline Arg StringArg(std::string s) {
  Arg a;
  a.kind = Arg::Kind::kString;
  a.s = std::move(s);
  return a;
}

inline Arg ListArg(std::vector<Arg> items) {
  Arg a;
  a.kind = Arg::Kind::kList;
  a.list = std::move(items);
  return a;
}

inline Arg IntListArg(const std::vector<int64_t>& v) {
  Arg a;
  a.kind = Arg::Kind::kList;
  for (int64_t x : v) a.list.push_back(IntArg(x));
  return a;
}

// A memory format by its wire value (kiln.v1.MemoryFormat).
inline Arg MemoryFormatArg(int64_t wire) {
  Arg a;
  a.kind = Arg::Kind::kMemoryFormat;
  a.i = wire;
  return a;
}

inline Arg DTypeArg(DType d) {
  Arg a;
  a.kind = Arg::Kind::kDType;
  a.i = static_cast<int64_t>(d);
  return a;
}

}  // namespace kiln::runtime
