#include "runtime/passes/activation_patterns.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "runtime/ir/arg_builders.h"
#include "runtime/kernels/post_ops.h"
#include "runtime/ops/fused_op_args.h"
#include "runtime/ops/registry.h"

namespace kiln::runtime {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool IsTensor(const Arg& a, ValueRef v) { return a.kind == Arg::Kind::kTensor && a.tensor == v; }

bool Number(const Arg& a, double* out) {
  if (a.kind == Arg::Kind::kInt) {
    *out = static_cast<double>(a.i);
    return true;
  }
  if (a.kind == Arg::Kind::kFloat) {
    *out = a.f;
    return true;
  }
  return false;
}

bool IsNumber(const Arg& a, double want, double tolerance = 0.0) {
  double v = 0;
  return Number(a, &v) && std::abs(v - want) <= tolerance;
}

bool IsOneOf(const std::string& target, const char* a, const char* b) {
  return target == a || target == b;
}

// The node reading `v` when it is the only use (and `v` no graph output).
int SoleUser(const Uses& uses, ValueRef v) {
  if (uses.Count(v) != 1 || uses.is_output[v.node][v.output]) return -1;
  return uses.users[v.node][v.output][0];
}

// A binary op `target` of `v` and a literal `want` (either order when
// `commutative`), alpha 1 for adds.
bool IsBinaryWithLiteral(const Node& n, ValueRef v, const char* tensor_target,
                         const char* scalar_target, double want, bool commutative,
                         double tolerance = 0.0) {
  if (!IsOneOf(n.target, tensor_target, scalar_target) || n.args.size() != 2) return false;
  for (const NamedArg& kw : n.kwargs) {
    if (kw.name != "alpha" || !IsNumber(kw.value, 1.0)) return false;
  }
  if (IsTensor(n.args[0], v) && IsNumber(n.args[1], want, tolerance)) return true;
  return commutative && IsTensor(n.args[1], v) && IsNumber(n.args[0], want, tolerance);
}

// mul(v, other) or mul(other, v).
bool IsMulOf(const Node& n, ValueRef a, ValueRef b) {
  if (n.target != "aten.mul.Tensor" || n.args.size() != 2 || !n.kwargs.empty()) return false;
  return (IsTensor(n.args[0], a) && IsTensor(n.args[1], b)) ||
         (IsTensor(n.args[0], b) && IsTensor(n.args[1], a));
}

// x / 6 as div(x, 6) or mul(x, 1/6) (either order).
bool IsDivBySix(const Node& n, ValueRef x) {
  return IsBinaryWithLiteral(n, x, "aten.div.Tensor", "aten.div.Scalar", 6.0, false) ||
         IsBinaryWithLiteral(n, x, "aten.mul.Tensor", "aten.mul.Scalar", 1.0 / 6.0, true, 1e-7);
}

// The bounds of a clamp / hardtanh of `x` with literal (or absent) bounds.
bool ClampBounds(const Node& n, ValueRef x, double* lo, double* hi) {
  const bool hardtanh = n.target == "aten.hardtanh.default";
  if (!hardtanh && n.target != "aten.clamp.default") return false;
  if (n.args.empty() || !IsTensor(n.args[0], x) || n.args.size() > 3) return false;
  *lo = hardtanh ? -1.0 : -kInf;
  *hi = hardtanh ? 1.0 : kInf;
  const Arg* bounds[2] = {n.args.size() > 1 ? &n.args[1] : nullptr,
                          n.args.size() > 2 ? &n.args[2] : nullptr};
  for (const NamedArg& kw : n.kwargs) {
    const bool is_min = kw.name == (hardtanh ? "min_val" : "min");
    const bool is_max = kw.name == (hardtanh ? "max_val" : "max");
    if (!is_min && !is_max) return false;
    bounds[is_min ? 0 : 1] = &kw.value;
  }
  double* out[2] = {lo, hi};
  for (int i = 0; i < 2; ++i) {
    if (bounds[i] == nullptr || bounds[i]->kind == Arg::Kind::kNone) continue;
    if (!Number(*bounds[i], out[i])) return false;
  }
  return true;
}

// A chain of clamps starting at the sole user of `x` whose composition is
// clamp(x, 0, 6). Appends its nodes; returns the chain's result.
std::optional<ValueRef> ClampToZeroSix(const Graph& g, const Uses& uses, ValueRef x,
                                       std::vector<int>* nodes) {
  double lo = -kInf, hi = kInf;
  ValueRef cur = x;
  // Each clamp's interval contains [0, 6], so the composition is the
  // intersection; it must end up exactly [0, 6].
  while (lo != 0.0 || hi != 6.0) {
    const int u = SoleUser(uses, cur);
    if (u < 0) return std::nullopt;
    double l = 0, h = 0;
    if (!ClampBounds(g.nodes[u], cur, &l, &h) || l > 0.0 || h < 6.0) return std::nullopt;
    lo = std::max(lo, l);
    hi = std::min(hi, h);
    nodes->push_back(u);
    cur = ValueRef{u, 0};
  }
  return cur;
}

// add(x, 3) -> clamp to [0, 6], starting at node `add`. Returns the
// clamp's result.
std::optional<ValueRef> ShiftedClamp(const Graph& g, const Uses& uses, ValueRef x, int add,
                                     std::vector<int>* nodes) {
  if (!IsBinaryWithLiteral(g.nodes[add], x, "aten.add.Tensor", "aten.add.Scalar", 3.0, true)) {
    return std::nullopt;
  }
  nodes->push_back(add);
  return ClampToZeroSix(g, uses, ValueRef{add, 0}, nodes);
}

std::optional<ActivationMatch> MatchHardsigmoid(const Graph& g, const Uses& uses, ValueRef v) {
  const int add = SoleUser(uses, v);
  if (add < 0) return std::nullopt;
  ActivationMatch m{"hardsigmoid", -1, {}};
  std::optional<ValueRef> clamped = ShiftedClamp(g, uses, v, add, &m.nodes);
  if (!clamped) return std::nullopt;
  const int div = SoleUser(uses, *clamped);
  if (div < 0 || !IsDivBySix(g.nodes[div], *clamped)) return std::nullopt;
  m.nodes.push_back(div);
  m.last = div;
  return m;
}

// v's two users are `first` (sigmoid or add) and the mul that closes the
// pattern.
std::optional<ActivationMatch> MatchTwoUserPattern(const Graph& g, const Uses& uses, ValueRef v) {
  const std::vector<int>& users = uses.users[v.node][v.output];
  if (users.size() != 2 || uses.is_output[v.node][v.output] || users[0] == users[1]) {
    return std::nullopt;
  }
  // Users are in node order: the first one starts the pattern.
  const int first = users[0], other = users[1];
  const Node& f = g.nodes[first];
  if (f.target == "aten.sigmoid.default") {
    if (f.args.size() != 1 || !IsTensor(f.args[0], v) || !f.kwargs.empty()) return std::nullopt;
    const int mul = SoleUser(uses, ValueRef{first, 0});
    if (mul != other || !IsMulOf(g.nodes[mul], v, ValueRef{first, 0})) return std::nullopt;
    return ActivationMatch{"silu", mul, {first, mul}};
  }
  ActivationMatch m{"hardswish", -1, {}};
  std::optional<ValueRef> clamped = ShiftedClamp(g, uses, v, first, &m.nodes);
  if (!clamped) return std::nullopt;
  const int next = SoleUser(uses, *clamped);
  if (next < 0) return std::nullopt;
  if (next == other && IsMulOf(g.nodes[next], v, *clamped)) {
    // (x * clamp) / 6
    const int div = SoleUser(uses, ValueRef{next, 0});
    if (div < 0 || !IsDivBySix(g.nodes[div], ValueRef{next, 0})) return std::nullopt;
    m.nodes.insert(m.nodes.end(), {next, div});
    m.last = div;
    return m;
  }
  if (IsDivBySix(g.nodes[next], *clamped)) {
    // x * (clamp / 6)
    const int mul = SoleUser(uses, ValueRef{next, 0});
    if (mul != other || !IsMulOf(g.nodes[mul], v, ValueRef{next, 0})) return std::nullopt;
    m.nodes.insert(m.nodes.end(), {next, mul});
    m.last = mul;
    return m;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ActivationMatch> MatchDecomposedActivation(const Graph& graph, const Uses& uses,
                                                         ValueRef value) {
  if (graph.MetaOf(value).dtype != DType::kF32) return std::nullopt;
  if (auto m = MatchTwoUserPattern(graph, uses, value)) return m;
  return MatchHardsigmoid(graph, uses, value);
}

std::optional<ActivationMatch> MatchActivation(const Graph& graph, const Uses& uses,
                                               ValueRef value) {
  if (auto m = MatchDecomposedActivation(graph, uses, value)) return m;
  const int u = SoleUser(uses, value);
  if (u < 0) return std::nullopt;
  const Node& user = graph.nodes[u];
  if (user.dead || user.args.empty() || !IsTensor(user.args[0], value)) return std::nullopt;
  std::string post_op = ActivationPostOp(user);
  if (post_op.empty()) return std::nullopt;
  return ActivationMatch{std::move(post_op), u, {u}};
}

std::string ActivationPostOp(const Node& node) {
  const OpDef* op = OpOf(node);
  if (op == nullptr) return "";
  if (op->traits.post_op_fn != nullptr) return op->traits.post_op_fn(node);
  if (op->traits.post_op != nullptr && node.kwargs.empty() && node.args.size() == 1) {
    return op->traits.post_op;
  }
  return "";
}

void AbsorbActivation(Graph& graph, const ActivationMatch& m, Arg* post_ops, std::string* name,
                      int* cur) {
  post_ops->list.push_back(StringArg(m.post_op));
  for (int n : m.nodes) {
    absl::StrAppend(name, "+", graph.nodes[n].name);
    graph.nodes[n].dead = true;
  }
  graph.nodes[*cur].dead = true;
  *cur = m.last;
}

void BecomeFused(Graph& graph, int at, const char* target, int op_index, std::vector<Arg> args,
                 std::string name, const TensorMeta& out) {
  Node& fused = graph.nodes[at];
  fused.dead = false;
  fused.target = target;
  fused.op_index = op_index;
  fused.args = std::move(args);
  fused.kwargs.clear();
  fused.name = std::move(name);
  fused.outputs = {out};
}

}  // namespace kiln::runtime
