// Scalar functions and post-op readers of elementwise ops (see
// elementwise_forms.h).
#include "runtime/ops/elementwise_forms.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/ops/op_def.h"

namespace kiln::runtime {
namespace {

// A Scalar? bound: `def` when absent or None, nullopt for a tensor.
std::optional<float> Bound(const NodeArgs& args, int pos, const char* name, float def) {
  const Arg* a = args.Find(pos, name);
  if (a == nullptr) return def;
  if (a->kind != Arg::Kind::kInt && a->kind != Arg::Kind::kFloat) return std::nullopt;
  absl::StatusOr<double> v = args.Float(pos, name);
  if (!v.ok()) return std::nullopt;
  return static_cast<float>(*v);
}

EwInstr Instr(EwOp op, std::vector<EwOperand> operands) { return EwInstr{op, std::move(operands)}; }

// add / sub, like elementwise.cc: alpha (negated for sub) in float; a
// number `other` is folded with it, a tensor one is scaled by it.
bool AddScaled(const NodeArgs& args, EwOperand x, float sign, EwRecipe* r) {
  const std::optional<EwOperand> other = ReadEwOperand(args, 1, "other", r);
  absl::StatusOr<double> alpha = args.Float(2, "alpha", 1.0);
  if (!other || !alpha.ok()) return false;
  const float falpha = sign * static_cast<float>(*alpha);
  if (other->kind == EwOperand::Kind::kLiteral) {
    r->steps.push_back(Instr(EwOp::kAdd, {x, EwOperand::Literal(falpha * other->value)}));
  } else if (falpha == 1.0f) {
    r->steps.push_back(Instr(EwOp::kAdd, {x, *other}));
  } else if (falpha == -1.0f) {
    r->steps.push_back(Instr(EwOp::kSub, {x, *other}));
  } else {
    r->steps.push_back(Instr(EwOp::kFma, {*other, EwOperand::Literal(falpha), x}));
  }
  return true;
}

bool Binary(const NodeArgs& args, EwOperand x, EwOp op, EwRecipe* r) {
  const std::optional<EwOperand> other = ReadEwOperand(args, 1, "other", r);
  if (!other) return false;
  r->steps.push_back(Instr(op, {x, *other}));
  return true;
}

// clamp / hardtanh with bounds that are numbers (or absent: `lo`, `hi`).
bool Clip(const NodeArgs& args, EwOperand x, const char* min_name, const char* max_name, float lo,
          float hi, EwRecipe* r) {
  const std::optional<float> l = Bound(args, 1, min_name, lo);
  const std::optional<float> h = Bound(args, 2, max_name, hi);
  if (!l || !h) return false;
  r->steps.push_back(Instr(EwOp::kClamp, {x, EwOperand::Literal(*l), EwOperand::Literal(*h)}));
  return true;
}

bool LiteralNumber(const Node& node, int pos, double* out) {
  if (pos >= static_cast<int>(node.args.size())) return false;
  const Arg& a = node.args[pos];
  if (a.kind == Arg::Kind::kFloat) {
    *out = a.f;
    return true;
  }
  if (a.kind == Arg::Kind::kInt) {
    *out = static_cast<double>(a.i);
    return true;
  }
  return false;
}

// "clip:<lo>:<hi>" for a clamp-like call with literal, finite bounds
// (positional only; absent ones take `lo`, `hi`).
std::string ClipPostOp(const Node& node, double lo, double hi) {
  if (!node.kwargs.empty()) return "";
  if (node.args.size() > 1 && !LiteralNumber(node, 1, &lo)) return "";
  if (node.args.size() > 2 && !LiteralNumber(node, 2, &hi)) return "";
  if (node.args.size() > 3 || !std::isfinite(lo) || !std::isfinite(hi)) return "";
  return absl::StrCat("clip:", lo, ":", hi);
}

}  // namespace

std::optional<EwOperand> ReadEwOperand(const NodeArgs& args, int pos, const char* name,
                                       EwRecipe* r) {
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

bool AddRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  return AddScaled(args, self, 1.0f, r);
}

bool SubRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  return AddScaled(args, self, -1.0f, r);
}

bool MulRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  return Binary(args, self, EwOp::kMul, r);
}

bool DivRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  return Binary(args, self, EwOp::kDiv, r);
}

bool GeluRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  const Arg* a = args.Find(1, "approximate");
  const std::string approximate =
      a == nullptr ? "none" : a->kind == Arg::Kind::kString ? a->s : "?";
  if (approximate != "none" && approximate != "tanh") return false;
  r->steps.push_back(Instr(approximate == "tanh" ? EwOp::kGeluTanh : EwOp::kGeluErf, {self}));
  return true;
}

bool ClampRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  // A clamp with neither bound is refused by its prepare function.
  if (args.Find(1, "min") == nullptr && args.Find(2, "max") == nullptr) return false;
  return Clip(args, self, "min", "max", -INFINITY, INFINITY, r);
}

bool HardtanhRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r) {
  return Clip(args, self, "min_val", "max_val", -1.f, 1.f, r);
}

bool PowTensorScalarRecipe(const NodeArgs& args, EwOperand x, EwRecipe* r) {
  // Only the exponents unary_math.cc computes without std::pow, the same
  // way it does.
  absl::StatusOr<double> e = args.Float(1, "exponent");
  if (!e.ok()) return false;
  const EwOperand one = EwOperand::Literal(1.f);
  if (*e == 2.0) {
    r->steps = {Instr(EwOp::kMul, {x, x})};
  } else if (*e == 3.0) {
    r->steps = {Instr(EwOp::kMul, {x, x}), Instr(EwOp::kMul, {EwOperand::Temp(0), x})};
  } else if (*e == 0.5) {
    r->steps = {Instr(EwOp::kSqrt, {x})};
  } else if (*e == -0.5) {
    r->steps = {Instr(EwOp::kRsqrt, {x})};
  } else if (*e == -1.0) {
    r->steps = {Instr(EwOp::kDiv, {one, x})};
  } else if (*e == -2.0) {
    r->steps = {Instr(EwOp::kMul, {x, x}), Instr(EwOp::kDiv, {one, EwOperand::Temp(0)})};
  } else {
    return false;
  }
  return true;
}

bool LeakyReluRecipe(const NodeArgs& args, EwOperand x, EwRecipe* r) {
  // x > 0 ? x : x * slope, as relu(x) + (x - relu(x)) * slope: exact on
  // both sides (x - relu(x) is 0 or x, the product rounds once).
  const std::optional<float> slope = Bound(args, 1, "negative_slope", 0.01f);
  if (!slope) return false;
  r->steps = {Instr(EwOp::kRelu, {x}), Instr(EwOp::kSub, {x, EwOperand::Temp(0)}),
              Instr(EwOp::kFma, {EwOperand::Temp(1), EwOperand::Literal(*slope),
                                 EwOperand::Temp(0)})};
  return true;
}

std::string GeluPostOp(const Node& node) {
  std::string approximate = "none";
  for (const NamedArg& kw : node.kwargs) {
    if (kw.name != "approximate" || kw.value.kind != Arg::Kind::kString) return "";
    approximate = kw.value.s;
  }
  if (node.args.size() == 2 && node.args[1].kind == Arg::Kind::kString) {
    approximate = node.args[1].s;
  } else if (node.args.size() != 1) {
    return "";
  }
  if (approximate == "none") return "gelu_erf";
  if (approximate == "tanh") return "gelu_tanh";
  return "";
}

std::string ClampPostOp(const Node& node) { return ClipPostOp(node, -INFINITY, INFINITY); }

std::string HardtanhPostOp(const Node& node) { return ClipPostOp(node, -1.0, 1.0); }

std::string LeakyReluPostOp(const Node& node) {
  // "leaky_relu:<slope>" for a literal slope (positional or absent).
  double slope = 0.01;
  if (!node.kwargs.empty() || node.args.size() > 2) return "";
  if (node.args.size() == 2 && !LiteralNumber(node, 1, &slope)) return "";
  if (!std::isfinite(slope)) return "";
  return absl::StrCat("leaky_relu:", slope);
}

}  // namespace kiln::runtime
