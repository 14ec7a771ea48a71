// The program a kiln.elementwise node runs: a short list of f32
// elementwise instructions over the node's tensor inputs, number literals
// and the results of earlier instructions; the last instruction's result is
// the node's output. passes/fuse_elementwise.cc writes programs,
// kernels/fused_elementwise.cc runs them.
//
// In the graph, a kiln.elementwise node's positional arguments are its
// tensor inputs followed by the program: a list of strings, one per
// instruction, `<op>(<operand>,...)` with each operand one of
//   x<k>     tensor input k (positional argument k)
//   t<i>     the result of instruction i (i before this instruction)
//   number   a float literal, in the shortest form that reads back
//            exactly ("1.5", "-inf")
// e.g. kiln.elementwise(in0, %5, ['mul(x0,x1)','add(t0,1.5)','sigmoid(t1)']).
//
// Ops, each with the arithmetic of the unfused ATen kernel it replaces:
//   add sub mul div (a, b)   fma (a, b, c): a * b + c, rounded once
//   neg relu sqrt rsqrt exp tanh sigmoid silu gelu_erf gelu_tanh
//   hardswish hardsigmoid (a)
//   clamp (a, lo, hi): lo and hi literals; NaN stays NaN
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::runtime {

// Limits that keep a kernel's per-thread block storage small: inputs, and
// results alive at once (see EwAssignSlots).
inline constexpr int kMaxEwInstructions = 64;
inline constexpr int kMaxEwInputs = 16;
inline constexpr int kMaxEwSlots = 16;

enum class EwOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kFma,
  kNeg,
  kRelu,
  kSqrt,
  kRsqrt,
  kExp,
  kTanh,
  kSigmoid,
  kSilu,
  kGeluErf,
  kGeluTanh,
  kHardswish,
  kHardsigmoid,
  kClamp,
};

struct EwOperand {
  enum class Kind : uint8_t { kInput, kTemp, kLiteral };
  Kind kind = Kind::kLiteral;
  int index = 0;      // kInput: input position; kTemp: instruction index
  float value = 0.f;  // kLiteral

  static EwOperand Input(int k) { return {Kind::kInput, k, 0.f}; }
  static EwOperand Temp(int i) { return {Kind::kTemp, i, 0.f}; }
  static EwOperand Literal(float v) { return {Kind::kLiteral, 0, v}; }
};

struct EwInstr {
  EwOp op = EwOp::kAdd;
  std::vector<EwOperand> operands;
};

const char* EwOpName(EwOp op);
// Number of operands `op` takes.
int EwArity(EwOp op);

// "mul(x0,t1)".
std::string FormatEwInstr(const EwInstr& instr);

// Where each instruction's result lives in the kernel's per-block storage:
// slot numbers, a slot reused once the last instruction reading it has run
// (a result may take the slot of its own operand, since lanes are read
// before they are written). Sets *num_slots to the slots used.
std::vector<int> EwAssignSlots(const std::vector<EwInstr>& program, int* num_slots);

// Parses instruction `index` of a program over `num_inputs` tensor inputs;
// INVALID_ARGUMENT saying what is wrong (unknown op, wrong operand count,
// reference to a later instruction or a missing input, clamp bounds that
// are not literals).
absl::StatusOr<EwInstr> ParseEwInstr(absl::string_view text, int num_inputs, int index);

}  // namespace kiln::runtime
