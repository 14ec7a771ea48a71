// Fuses chains and trees of f32 elementwise ops (those ops.def gives a
// scalar function: arithmetic with tensors or numbers, activations, clamps,
// the small powers ATen special-cases) into one kiln.elementwise node,
// which runs them in a single pass over the elements
// (kernels/fused_elementwise.cc) so intermediates never go to memory.
//
// A group grows backwards from its last op (the root): the producer of an
// operand joins when it is a fusible op whose output meta is the root's and
// whose value is read only inside the group (and is not a graph output).
// Only the safe case is fused: every tensor an op of the group reads must be
// f32 and either have the output's shape or hold a single element (a
// broadcast scalar); an op that broadcasts anything else stays out. A group
// needs two ops. The fused node takes the root's place, so every input it
// reads is computed before it, and no node outside the group needs a value
// the group swallowed.
//
// Runs after the conv/matmul post-op passes: the activations they fold into
// kiln.conv2d / kiln.addmm are gone by then.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/ops/elementwise_forms.h"
#include "runtime/ops/elementwise_program.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// The recipe of a fusible node, from its op's scalar function
// (ops/op_traits.h); nullopt for anything else.
std::optional<EwRecipe> Describe(const Graph& g, const Node& node,
                                 const std::vector<const void*>& constant_data) {
  if (node.kind != Node::Kind::kOp || node.dead || node.outputs.size() != 1 ||
      node.outputs[0].dtype != DType::kF32) {
    return std::nullopt;
  }
  const OpDef* op = OpOf(node);
  if (op == nullptr || !op->traits.Fusible()) return std::nullopt;
  NodeArgs args(g, node, constant_data);
  EwRecipe r;
  const std::optional<EwOperand> self = ReadEwOperand(args, 0, "self", &r);
  if (!self || self->kind != EwOperand::Kind::kInput) return std::nullopt;
  if (op->traits.ew_op >= 0) {
    r.steps.push_back(EwInstr{static_cast<EwOp>(op->traits.ew_op), {*self}});
    return r;
  }
  if (!op->traits.ew_recipe(args, *self, &r)) return std::nullopt;
  return r;
}

// Every tensor the node reads is f32 and either `out`'s shape or a single
// element that broadcasts to it without changing the output's shape.
bool OperandsFit(const Graph& g, const EwRecipe& r, const TensorMeta& out) {
  for (const ValueRef& v : r.tensors) {
    const TensorMeta& m = g.MetaOf(v);
    if (m.dtype != DType::kF32) return false;
    if (m.shape != out.shape && !(m.NumElements() == 1 && m.rank() <= out.rank())) return false;
  }
  return true;
}

// The group's tensor inputs (values its members read from outside it), in
// the order the program first reads them.
std::vector<ValueRef> ExternalInputs(const std::vector<int>& members,
                                     const std::vector<std::optional<EwRecipe>>& recipes) {
  std::vector<ValueRef> inputs;
  for (int m : members) {
    for (const ValueRef& v : recipes[m]->tensors) {
      const bool internal = std::find(members.begin(), members.end(), v.node) != members.end();
      if (!internal && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) {
        inputs.push_back(v);
      }
    }
  }
  return inputs;
}

// The kiln.elementwise program of a group (members in graph order, root
// last) over `inputs`.
std::vector<EwInstr> Program(const std::vector<int>& members, const std::vector<ValueRef>& inputs,
                             const std::vector<std::optional<EwRecipe>>& recipes) {
  std::vector<EwInstr> program;
  std::vector<std::pair<int, int>> result_of;  // (member node, its result's instruction)
  for (int m : members) {
    const EwRecipe& r = *recipes[m];
    const int first = static_cast<int>(program.size());
    for (EwInstr instr : r.steps) {
      for (EwOperand& o : instr.operands) {
        if (o.kind == EwOperand::Kind::kTemp) {
          o.index += first;
        } else if (o.kind == EwOperand::Kind::kInput) {
          const ValueRef v = r.tensors[o.index];
          auto produced = std::find_if(result_of.begin(), result_of.end(),
                                       [&](const auto& p) { return p.first == v.node; });
          o = produced != result_of.end()
                  ? EwOperand::Temp(produced->second)
                  : EwOperand::Input(static_cast<int>(
                        std::find(inputs.begin(), inputs.end(), v) - inputs.begin()));
        }
      }
      program.push_back(std::move(instr));
    }
    result_of.emplace_back(m, static_cast<int>(program.size()) - 1);
  }
  return program;
}

// The group's program fits kiln.elementwise's limits on instructions,
// inputs and results alive at once.
bool WithinKernelLimits(std::vector<int> members,
                        const std::vector<std::optional<EwRecipe>>& recipes) {
  int length = 0;
  for (int m : members) length += static_cast<int>(recipes[m]->steps.size());
  if (length > kMaxEwInstructions) return false;
  std::sort(members.begin(), members.end());
  const std::vector<ValueRef> inputs = ExternalInputs(members, recipes);
  if (static_cast<int>(inputs.size()) > kMaxEwInputs) return false;
  int slots = 0;
  EwAssignSlots(Program(members, inputs, recipes), &slots);
  return slots <= kMaxEwSlots;
}

}  // namespace

absl::Status FuseElementwise(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int n = static_cast<int>(g.nodes.size());
  const int fused_index = FindOp("kiln.elementwise");
  std::vector<std::optional<EwRecipe>> recipes(n);
  for (int i = 0; i < n; ++i) {
    recipes[i] = Describe(g, g.nodes[i], ctx.constant_data);
    if (recipes[i] && !OperandsFit(g, *recipes[i], g.nodes[i].outputs[0])) recipes[i].reset();
  }
  std::vector<bool> taken(n, false);
  const Uses uses = ComputeUses(g);
  // Roots from the last node back, so each group starts at the latest op it
  // can and earlier ops are left for groups of their own.
  for (int root = n - 1; root >= 0; --root) {
    if (!recipes[root] || taken[root]) continue;
    const TensorMeta& meta = g.nodes[root].outputs[0];
    std::vector<int> members = {root};
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t i = 0; i < members.size(); ++i) {
        for (const ValueRef& v : recipes[members[i]]->tensors) {
          const int p = v.node;
          if (v.output != 0 || !recipes[p] || taken[p] || g.nodes[p].outputs[0] != meta ||
              std::find(members.begin(), members.end(), p) != members.end() ||
              uses.is_output[p][0]) {
            continue;
          }
          const std::vector<int>& users = uses.users[p][0];
          const bool all_inside = std::all_of(users.begin(), users.end(), [&](int u) {
            return std::find(members.begin(), members.end(), u) != members.end();
          });
          if (!all_inside) continue;
          std::vector<int> grown = members;
          grown.push_back(p);
          if (!WithinKernelLimits(grown, recipes)) continue;
          members = std::move(grown);
          grew = true;
        }
      }
    }
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());
    const std::vector<ValueRef> inputs = ExternalInputs(members, recipes);
    const std::vector<EwInstr> program = Program(members, inputs, recipes);

    std::vector<Arg> args;
    for (const ValueRef& v : inputs) args.push_back(TensorArg(v));
    Arg list = ListArg({});
    for (const EwInstr& instr : program) list.list.push_back(StringArg(FormatEwInstr(instr)));
    args.push_back(std::move(list));
    std::string name;
    for (int m : members) {
      absl::StrAppend(&name, name.empty() ? "" : "+", g.nodes[m].name);
      taken[m] = true;
      if (m != root) g.nodes[m].dead = true;
    }
    Node& fused = g.nodes[root];
    fused.target = "kiln.elementwise";
    fused.op_index = fused_index;
    fused.args = std::move(args);
    fused.kwargs.clear();
    fused.name = std::move(name);
    // `uses` is not recomputed: the only users that changed are the dead
    // members, now replaced by the fused node, and neither can join a later
    // (earlier-rooted) group, so every later decision comes out the same.
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
