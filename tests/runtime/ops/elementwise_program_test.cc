// The text form of kiln.elementwise instructions: what the pass writes
// reads back unchanged, and malformed instructions are refused with a
// message saying why.
#include "runtime/ops/elementwise_program.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"

namespace kiln::runtime {
namespace {

TEST(ElementwiseProgram, FormatsReadably) {
  EXPECT_EQ(FormatEwInstr({EwOp::kMul, {EwOperand::Input(0), EwOperand::Input(1)}}),
            "mul(x0,x1)");
  EXPECT_EQ(FormatEwInstr({EwOp::kAdd, {EwOperand::Temp(0), EwOperand::Literal(1.5f)}}),
            "add(t0,1.5)");
  EXPECT_EQ(FormatEwInstr({EwOp::kClamp,
                           {EwOperand::Temp(2), EwOperand::Literal(-INFINITY),
                            EwOperand::Literal(0.1f)}}),
            "clamp(t2,-inf,0.1)");
}

TEST(ElementwiseProgram, LiteralsRoundTripExactly) {
  for (float v : {0.1f, -0.0f, 1e-30f, 3.4028235e38f, 0.7978845608f, 1.0f / 3.0f, 1e-45f,
                  -123456.789f}) {
    const std::string text =
        FormatEwInstr({EwOp::kMul, {EwOperand::Input(0), EwOperand::Literal(v)}});
    auto back = ParseEwInstr(text, 1, 0);
    ASSERT_TRUE(back.ok()) << text << ": " << back.status();
    EXPECT_EQ(back->operands[1].value, v) << text;
    EXPECT_EQ(std::signbit(back->operands[1].value), std::signbit(v)) << text;
  }
}

TEST(ElementwiseProgram, ParsesWhatItFormats) {
  const EwInstr instr{EwOp::kFma,
                      {EwOperand::Input(2), EwOperand::Literal(-2.5f), EwOperand::Temp(3)}};
  auto back = ParseEwInstr(FormatEwInstr(instr), 3, 4);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->op, EwOp::kFma);
  ASSERT_EQ(back->operands.size(), 3u);
  EXPECT_EQ(back->operands[0].kind, EwOperand::Kind::kInput);
  EXPECT_EQ(back->operands[0].index, 2);
  EXPECT_EQ(back->operands[1].value, -2.5f);
  EXPECT_EQ(back->operands[2].kind, EwOperand::Kind::kTemp);
  EXPECT_EQ(back->operands[2].index, 3);
}

TEST(ElementwiseProgram, RejectsMalformedInstructions) {
  struct Bad {
    const char* text;
    const char* why;
  };
  for (const Bad& b : {Bad{"cosh(x0)", "unknown op"}, Bad{"mul(x0)", "takes 2 operands"},
                       Bad{"mul x0 x1", "expected"}, Bad{"add(x0,x5)", "no tensor input 5"},
                       Bad{"exp(t1)", "not an earlier result"}, Bad{"exp(t0)", "not an earlier"},
                       Bad{"add(x0,1.5.2)", "bad operand"}, Bad{"neg(x-1)", "bad operand"},
                       Bad{"clamp(x0,x1,1)", "bounds must be numbers"}, Bad{"", "expected"}}) {
    auto r = ParseEwInstr(b.text, 2, 0);
    ASSERT_FALSE(r.ok()) << b.text;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << b.text;
    EXPECT_NE(r.status().message().find(b.why), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace kiln::runtime
