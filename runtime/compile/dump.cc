#include "runtime/compile/dump.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/ir/arg_builders.h"

namespace kiln::runtime {
namespace {

std::string ArgText(const Graph& g, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::kNone: return "None";
    case Arg::Kind::kTensor: {
      const Node& src = g.nodes[a.tensor.node];
      std::string base = src.kind == Node::Kind::kInput ? absl::StrCat("in", src.input_index)
                                                        : absl::StrCat("%", a.tensor.node);
      return a.tensor.output == 0 ? base : absl::StrCat(base, ".", a.tensor.output);
    }
    case Arg::Kind::kInt: return absl::StrCat(a.i);
    case Arg::Kind::kFloat: return absl::StrCat(a.f);
    case Arg::Kind::kBool: return a.b ? "True" : "False";
    case Arg::Kind::kString: return absl::StrCat("'", a.s, "'");
    case Arg::Kind::kList: {
      std::vector<std::string> items;
      for (const Arg& item : a.list) items.push_back(ArgText(g, item));
      return absl::StrCat("[", absl::StrJoin(items, ","), "]");
    }
    case Arg::Kind::kDType: return absl::StrCat("dtype(", a.i, ")");
    case Arg::Kind::kDevice: return a.s;
    case Arg::Kind::kMemoryFormat: return absl::StrCat("memory_format(", a.i, ")");
  }
  return "?";
}

std::string Metas(const Node& node) {
  std::vector<std::string> m;
  for (const TensorMeta& t : node.outputs) m.push_back(t.ToString());
  return absl::StrJoin(m, ", ");
}

}  // namespace

std::string DumpCompiledGraph(const CompiledGraph& cg) {
  const Graph& g = cg.graph;
  std::string out = absl::StrCat("# ", cg.steps.size(), " steps, ", cg.input_metas.size(),
                                 " inputs, ", cg.output_metas.size(), " outputs, arena ",
                                 cg.arena_bytes, " B + scratch ", cg.scratch_bytes, " B; ",
                                 CompileOptionsString(cg.options()), "\n");
  std::vector<bool> is_step(g.nodes.size(), false);
  for (const CompiledStep& s : cg.steps) is_step[s.node] = true;
  std::vector<bool> joined(g.nodes.size(), false);
  for (int node : cg.joined_cats) joined[node] = true;
  // Steps that share a wave with others (branches): "|| wave W" on each,
  // W counting the graph's waves from 0 in execution order.
  std::vector<int> shared_wave(g.nodes.size(), -1);
  int shared_waves = 0, shared_steps = 0;
  for (size_t w = 0; w < cg.waves.size(); ++w) {
    if (cg.waves[w].size() < 2) continue;
    ++shared_waves;
    shared_steps += cg.waves[w].size();
    for (int s = cg.waves[w].begin; s < cg.waves[w].end; ++s) {
      shared_wave[cg.steps[s].node] = static_cast<int>(w);
    }
  }
  if (shared_waves > 0) {
    absl::StrAppend(&out, "# ", cg.waves.size(), " waves; ", shared_steps,
                    " steps in ", shared_waves,
                    " waves of independent steps that may run concurrently (marked || wave W)\n");
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = g.nodes[i];
    if (node.dead || node.kind == Node::Kind::kInput) continue;
    if (node.kind == Node::Kind::kConstant) {
      // Client constants are listed only when folded or created by passes.
      if (!node.constant_hash.empty()) continue;
      absl::StrAppend(&out, "%", i, " = constant ", node.outputs[0].ToString(), "  # ",
                      node.name, node.target.empty() ? "" : " (folded)", "\n");
      continue;
    }
    std::vector<std::string> args;
    for (const Arg& a : node.args) args.push_back(ArgText(g, a));
    for (const NamedArg& a : node.kwargs) args.push_back(absl::StrCat(a.name, "=", ArgText(g, a.value)));
    std::string place;
    const ValueSlot& slot = cg.slots[i].empty() ? ValueSlot{} : cg.slots[i][0];
    if (slot.kind == ValueSlot::Kind::kArena) place = absl::StrCat("@", slot.offset);
    if (slot.kind == ValueSlot::Kind::kOutput) place = absl::StrCat("@out", slot.index);
    const std::string wave =
        shared_wave[i] >= 0 ? absl::StrCat(" || wave ", shared_wave[i]) : std::string();
    absl::StrAppend(&out, "%", i, " = ", node.target, "(", absl::StrJoin(args, ", "), ") : ",
                    Metas(node), " ", place,
                    is_step[i] ? "" : joined[i] ? " (inputs computed in place)" : " (alias)", wave, "  # ",
                    node.name, "\n");
  }
  std::vector<std::string> outs;
  for (const ValueRef& o : g.outputs) outs.push_back(ArgText(g, TensorArg(o)));
  absl::StrAppend(&out, "return ", absl::StrJoin(outs, ", "), "\n");
  return out;
}

}  // namespace kiln::runtime
