// Fuses chains and trees of f32 elementwise ops (arithmetic with tensors or
// numbers, activations, clamps, the small powers ATen special-cases) into
// one kiln.elementwise node, which runs them in a single pass over the
// elements (kernels/fused_elementwise.cc) so intermediates never go to
// memory.
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
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/elementwise_program.h"
#include "runtime/ops/op_def.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// What one node computes, as instructions over its own operands: kInput k
// is tensors[k], kTemp i the node's i-th instruction; the last instruction
// gives the node's output.
struct Recipe {
  std::vector<ValueRef> tensors;
  std::vector<EwInstr> steps;
};

// Reads operand (pos, name) of a node: a tensor (recorded in `r`) or a
// number, which becomes a float literal as the unfused kernels convert it.
std::optional<EwOperand> ReadOperand(const NodeArgs& args, int pos, const char* name, Recipe* r) {
  const Arg* a = args.Find(pos, name);
  if (a == nullptr) return std::nullopt;
  switch (a->kind) {
    case Arg::Kind::kTensor:
      r->tensors.push_back(a->tensor);
      return EwOperand::Input(static_cast<int>(r->tensors.size()) - 1);
    case Arg::Kind::kInt:
      return EwOperand::Literal(static_cast<float>(a->i));
    case Arg::Kind::kFloat:
      return EwOperand::Literal(static_cast<float>(a->f));
    default:
      return std::nullopt;
  }
}

// A Scalar? bound: +-inf when absent or None, nullopt for a tensor.
std::optional<float> Bound(const NodeArgs& args, int pos, const char* name, float def) {
  const Arg* a = args.Find(pos, name);
  if (a == nullptr) return def;
  if (a->kind != Arg::Kind::kInt && a->kind != Arg::Kind::kFloat) return std::nullopt;
  absl::StatusOr<double> v = args.Float(pos, name);
  if (!v.ok()) return std::nullopt;
  return static_cast<float>(*v);
}

EwInstr Instr(EwOp op, std::vector<EwOperand> operands) { return EwInstr{op, std::move(operands)}; }

// The recipe of a fusible node, mirroring how each op's prepare function
// reads its arguments; nullopt for anything else.
std::optional<Recipe> Describe(const Graph& g, const Node& node,
                               const std::vector<const void*>& constant_data) {
  if (node.kind != Node::Kind::kOp || node.dead || node.outputs.size() != 1 ||
      node.outputs[0].dtype != DType::kF32) {
    return std::nullopt;
  }
  const std::string& t = node.target;
  NodeArgs args(g, node, constant_data);
  Recipe r;
  const std::optional<EwOperand> self = ReadOperand(args, 0, "self", &r);
  if (!self || self->kind != EwOperand::Kind::kInput) return std::nullopt;
  const EwOperand x = *self;

  if (t == "aten.add.Tensor" || t == "aten.sub.Tensor") {
    // Like elementwise.cc: alpha (negated for sub) in float; a number
    // `other` is folded with it, a tensor one is scaled by it.
    const std::optional<EwOperand> other = ReadOperand(args, 1, "other", &r);
    absl::StatusOr<double> alpha = args.Float(2, "alpha", 1.0);
    if (!other || !alpha.ok()) return std::nullopt;
    const float falpha = (t == "aten.sub.Tensor" ? -1.0f : 1.0f) * static_cast<float>(*alpha);
    if (other->kind == EwOperand::Kind::kLiteral) {
      r.steps.push_back(Instr(EwOp::kAdd, {x, EwOperand::Literal(falpha * other->value)}));
    } else if (falpha == 1.0f) {
      r.steps.push_back(Instr(EwOp::kAdd, {x, *other}));
    } else if (falpha == -1.0f) {
      r.steps.push_back(Instr(EwOp::kSub, {x, *other}));
    } else {
      r.steps.push_back(Instr(EwOp::kFma, {*other, EwOperand::Literal(falpha), x}));
    }
    return r;
  }
  if (t == "aten.mul.Tensor" || t == "aten.mul.Scalar" || t == "aten.div.Tensor") {
    const std::optional<EwOperand> other = ReadOperand(args, 1, "other", &r);
    if (!other) return std::nullopt;
    r.steps.push_back(Instr(t == "aten.div.Tensor" ? EwOp::kDiv : EwOp::kMul, {x, *other}));
    return r;
  }
  // Unary ops with no other arguments.
  struct Simple {
    const char* target;
    EwOp op;
  };
  static constexpr Simple kSimple[] = {
      {"aten.relu.default", EwOp::kRelu},       {"aten.neg.default", EwOp::kNeg},
      {"aten.exp.default", EwOp::kExp},         {"aten.tanh.default", EwOp::kTanh},
      {"aten.sigmoid.default", EwOp::kSigmoid}, {"aten.silu.default", EwOp::kSilu},
      {"aten.sqrt.default", EwOp::kSqrt},       {"aten.rsqrt.default", EwOp::kRsqrt},
      {"aten.hardswish.default", EwOp::kHardswish},
      {"aten.hardsigmoid.default", EwOp::kHardsigmoid},
  };
  for (const Simple& s : kSimple) {
    if (t == s.target) {
      r.steps.push_back(Instr(s.op, {x}));
      return r;
    }
  }
  if (t == "aten.gelu.default") {
    const Arg* a = args.Find(1, "approximate");
    const std::string approximate =
        a == nullptr ? "none" : a->kind == Arg::Kind::kString ? a->s : "?";
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    r.steps.push_back(Instr(approximate == "tanh" ? EwOp::kGeluTanh : EwOp::kGeluErf, {x}));
    return r;
  }
  if (t == "aten.clamp.default" || t == "aten.hardtanh.default") {
    const bool clamp = t == "aten.clamp.default";
    const float inf = INFINITY;
    const std::optional<float> lo = Bound(args, 1, clamp ? "min" : "min_val", clamp ? -inf : -1.f);
    const std::optional<float> hi = Bound(args, 2, clamp ? "max" : "max_val", clamp ? inf : 1.f);
    if (!lo || !hi || (clamp && args.Find(1, "min") == nullptr && args.Find(2, "max") == nullptr)) {
      return std::nullopt;
    }
    r.steps.push_back(Instr(EwOp::kClamp, {x, EwOperand::Literal(*lo), EwOperand::Literal(*hi)}));
    return r;
  }
  if (t == "aten.pow.Tensor_Scalar") {
    // Only the exponents unary_math.cc computes without std::pow, the same
    // way it does.
    absl::StatusOr<double> e = args.Float(1, "exponent");
    if (!e.ok()) return std::nullopt;
    const EwOperand one = EwOperand::Literal(1.f);
    if (*e == 2.0) {
      r.steps = {Instr(EwOp::kMul, {x, x})};
    } else if (*e == 3.0) {
      r.steps = {Instr(EwOp::kMul, {x, x}), Instr(EwOp::kMul, {EwOperand::Temp(0), x})};
    } else if (*e == 0.5) {
      r.steps = {Instr(EwOp::kSqrt, {x})};
    } else if (*e == -0.5) {
      r.steps = {Instr(EwOp::kRsqrt, {x})};
    } else if (*e == -1.0) {
      r.steps = {Instr(EwOp::kDiv, {one, x})};
    } else if (*e == -2.0) {
      r.steps = {Instr(EwOp::kMul, {x, x}), Instr(EwOp::kDiv, {one, EwOperand::Temp(0)})};
    } else {
      return std::nullopt;
    }
    return r;
  }
  return std::nullopt;
}

// Every tensor the node reads is f32 and either `out`'s shape or a single
// element that broadcasts to it without changing the output's shape.
bool OperandsFit(const Graph& g, const Recipe& r, const TensorMeta& out) {
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
                                     const std::vector<std::optional<Recipe>>& recipes) {
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
                             const std::vector<std::optional<Recipe>>& recipes) {
  std::vector<EwInstr> program;
  std::vector<std::pair<int, int>> result_of;  // (member node, its result's instruction)
  for (int m : members) {
    const Recipe& r = *recipes[m];
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
                        const std::vector<std::optional<Recipe>>& recipes) {
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
  std::vector<std::optional<Recipe>> recipes(n);
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
