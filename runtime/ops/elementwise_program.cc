// Text form of kiln.elementwise instructions (see elementwise_program.h).
#include "runtime/ops/elementwise_program.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kiln::runtime {
namespace {

constexpr EwOp kAllOps[] = {
    EwOp::kAdd,     EwOp::kSub,     EwOp::kMul,       EwOp::kDiv,         EwOp::kFma,
    EwOp::kNeg,     EwOp::kRelu,    EwOp::kSqrt,      EwOp::kRsqrt,       EwOp::kExp,
    EwOp::kTanh,    EwOp::kSigmoid, EwOp::kSilu,      EwOp::kGeluErf,     EwOp::kGeluTanh,
    EwOp::kHardswish, EwOp::kHardsigmoid, EwOp::kClamp,
};

// The shortest "%.<p>g" form that reads back as exactly `v`, so programs
// stay readable in dumps (0.5, not 0.500000000) and lose nothing.
std::string FormatLiteral(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s;
  for (int precision = 1; precision <= 9; ++precision) {
    s = absl::StrFormat("%.*g", precision, v);
    float back = 0.f;
    if (absl::SimpleAtof(s, &back) && back == v && std::signbit(back) == std::signbit(v)) break;
  }
  return s;
}

bool ParseLiteral(absl::string_view s, float* out) {
  if (s == "nan") {
    *out = std::numeric_limits<float>::quiet_NaN();
    return true;
  }
  if (s == "inf" || s == "-inf") {
    *out = s[0] == '-' ? -std::numeric_limits<float>::infinity()
                       : std::numeric_limits<float>::infinity();
    return true;
  }
  return absl::SimpleAtof(s, out) && std::isfinite(*out);
}

std::string FormatOperand(const EwOperand& o) {
  switch (o.kind) {
    case EwOperand::Kind::kInput:
      return absl::StrCat("x", o.index);
    case EwOperand::Kind::kTemp:
      return absl::StrCat("t", o.index);
    case EwOperand::Kind::kLiteral:
      return FormatLiteral(o.value);
  }
  return "?";
}

}  // namespace

const char* EwOpName(EwOp op) {
  switch (op) {
    case EwOp::kAdd: return "add";
    case EwOp::kSub: return "sub";
    case EwOp::kMul: return "mul";
    case EwOp::kDiv: return "div";
    case EwOp::kFma: return "fma";
    case EwOp::kNeg: return "neg";
    case EwOp::kRelu: return "relu";
    case EwOp::kSqrt: return "sqrt";
    case EwOp::kRsqrt: return "rsqrt";
    case EwOp::kExp: return "exp";
    case EwOp::kTanh: return "tanh";
    case EwOp::kSigmoid: return "sigmoid";
    case EwOp::kSilu: return "silu";
    case EwOp::kGeluErf: return "gelu_erf";
    case EwOp::kGeluTanh: return "gelu_tanh";
    case EwOp::kHardswish: return "hardswish";
    case EwOp::kHardsigmoid: return "hardsigmoid";
    case EwOp::kClamp: return "clamp";
  }
  return "?";
}

int EwArity(EwOp op) {
  switch (op) {
    case EwOp::kAdd:
    case EwOp::kSub:
    case EwOp::kMul:
    case EwOp::kDiv:
      return 2;
    case EwOp::kFma:
    case EwOp::kClamp:
      return 3;
    default:
      return 1;
  }
}

std::string FormatEwInstr(const EwInstr& instr) {
  std::vector<std::string> operands;
  for (const EwOperand& o : instr.operands) operands.push_back(FormatOperand(o));
  return absl::StrCat(EwOpName(instr.op), "(", absl::StrJoin(operands, ","), ")");
}

std::vector<int> EwAssignSlots(const std::vector<EwInstr>& program, int* num_slots) {
  const int n = static_cast<int>(program.size());
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < n; ++i) {
    for (const EwOperand& o : program[i].operands) {
      if (o.kind == EwOperand::Kind::kTemp) last_use[o.index] = i;
    }
  }
  std::vector<int> slot(n, -1), free_slots;
  *num_slots = 0;
  for (int i = 0; i < n; ++i) {
    for (const EwOperand& o : program[i].operands) {
      if (o.kind == EwOperand::Kind::kTemp && last_use[o.index] == i &&
          std::find(free_slots.begin(), free_slots.end(), slot[o.index]) == free_slots.end()) {
        free_slots.push_back(slot[o.index]);
      }
    }
    if (free_slots.empty()) {
      slot[i] = (*num_slots)++;
    } else {
      slot[i] = free_slots.back();
      free_slots.pop_back();
    }
  }
  return slot;
}

absl::StatusOr<EwInstr> ParseEwInstr(absl::string_view text, int num_inputs, int index) {
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("program instruction ", index, " '", text, "': ", what));
  };
  const size_t open = text.find('(');
  if (open == absl::string_view::npos || text.empty() || text.back() != ')') {
    return error("expected <op>(<operands>)");
  }
  const absl::string_view name = text.substr(0, open);
  EwInstr instr;
  bool known = false;
  for (EwOp op : kAllOps) {
    if (name == EwOpName(op)) {
      instr.op = op;
      known = true;
    }
  }
  if (!known) return error("unknown op");
  const absl::string_view inner = text.substr(open + 1, text.size() - open - 2);
  for (absl::string_view item : absl::StrSplit(inner, ',')) {
    EwOperand o;
    int k = 0;
    if (!item.empty() && (item[0] == 'x' || item[0] == 't')) {
      if (!absl::SimpleAtoi(item.substr(1), &k) || k < 0) return error("bad operand");
      if (item[0] == 'x') {
        if (k >= num_inputs) return error(absl::StrCat("no tensor input ", k));
        o = EwOperand::Input(k);
      } else {
        if (k >= index) return error(absl::StrCat("t", k, " is not an earlier result"));
        o = EwOperand::Temp(k);
      }
    } else {
      float v = 0.f;
      if (!ParseLiteral(item, &v)) return error(absl::StrCat("bad operand '", item, "'"));
      o = EwOperand::Literal(v);
    }
    instr.operands.push_back(o);
  }
  if (static_cast<int>(instr.operands.size()) != EwArity(instr.op)) {
    return error(absl::StrCat("takes ", EwArity(instr.op), " operands"));
  }
  if (instr.op == EwOp::kClamp && (instr.operands[1].kind != EwOperand::Kind::kLiteral ||
                                   instr.operands[2].kind != EwOperand::Kind::kLiteral)) {
    return error("clamp bounds must be numbers");
  }
  return instr;
}

}  // namespace kiln::runtime
