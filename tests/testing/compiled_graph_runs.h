// For tests that compile a built graph in one layout and compare it with
// another: compile with a layout option, run once on one input, count the
// steps of an op, and compare outputs within a tolerance relative to each
// output's scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/compile/compiler.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "tests/testing/constant_table.h"

namespace kiln::testing {

// Null (with a test failure) when the graph does not compile.
inline std::unique_ptr<runtime::CompiledGraph> CompileInLayout(const kiln::v1::Graph& graph,
                                                               ConstantTable& consts,
                                                               runtime::LayoutOption layout) {
  auto ir = runtime::GraphFromProto(graph);
  EXPECT_TRUE(ir.ok()) << ir.status();
  if (!ir.ok()) return nullptr;
  ir->options.layout = layout;
  auto cg = runtime::Compile(*std::move(ir), consts.Resolver());
  EXPECT_TRUE(cg.ok()) << cg.status();
  return cg.ok() ? *std::move(cg) : nullptr;
}

// Every output of one run on the single input `x`.
inline std::vector<std::vector<float>> RunOnce(const runtime::CompiledGraph& cg,
                                               const std::vector<float>& x) {
  std::vector<std::vector<float>> outs;
  std::vector<void*> ptrs;
  for (const runtime::TensorMeta& m : cg.output_metas) outs.emplace_back(m.NumElements());
  for (auto& o : outs) ptrs.push_back(o.data());
  const void* ins[] = {x.data()};
  EXPECT_TRUE(runtime::Execute(cg, ins, ptrs).ok());
  return outs;
}

inline int StepsOf(const runtime::CompiledGraph& cg, const std::string& target) {
  int n = 0;
  for (const runtime::CompiledStep& s : cg.steps) n += cg.graph.nodes[s.node].target == target;
  return n;
}

// Each element of `got` within tolerance * max|want[o]| of `want`.
inline void ExpectOutputsNear(const std::vector<std::vector<float>>& got,
                              const std::vector<std::vector<float>>& want, float tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    float scale = 0;
    for (float v : want[o]) scale = std::max(scale, std::abs(v));
    ASSERT_EQ(got[o].size(), want[o].size());
    for (size_t i = 0; i < got[o].size(); ++i) {
      EXPECT_NEAR(got[o][i], want[o][i], tolerance * scale) << "output " << o << " at " << i;
    }
  }
}

}  // namespace kiln::testing
