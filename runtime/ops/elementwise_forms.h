// The fused forms of elementwise ops, named by their traits in ops.def:
//
//  - scalar functions (EwRecipeFn, ops/op_traits.h): a call of the op as
//    kiln.elementwise instructions (elementwise_program.h), for
//    passes/fuse_elementwise.cc;
//  - post-op readers (PostOpFn): the post-op (post_ops.h) a call of an
//    activation becomes, when its arguments decide it.
//
// Each reads a node's arguments the way the op's prepare function does, so
// a fused call computes what the unfused kernel would.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/ir/graph.h"
#include "runtime/ops/elementwise_program.h"

namespace kiln::runtime {

class NodeArgs;

// What one node computes, as instructions over its own operands: kInput k
// is tensors[k], kTemp i the node's i-th instruction; the last instruction
// gives the node's output.
struct EwRecipe {
  std::vector<ValueRef> tensors;
  std::vector<EwInstr> steps;
};

// Reads operand (pos, name) of a node: a tensor (recorded in `r`) or a
// number, which becomes a float literal as the unfused kernels convert it;
// nullopt when absent or of another kind.
std::optional<EwOperand> ReadEwOperand(const NodeArgs& args, int pos, const char* name,
                                       EwRecipe* r);

// Scalar functions of ops with arguments beyond their input.
bool AddRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool SubRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool MulRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool DivRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool GeluRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool ClampRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool HardtanhRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool PowTensorScalarRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);
bool LeakyReluRecipe(const NodeArgs& args, EwOperand self, EwRecipe* r);

// Post-op readers of activations with arguments.
std::string GeluPostOp(const Node& node);
std::string ClampPostOp(const Node& node);
std::string HardtanhPostOp(const Node& node);
std::string LeakyReluPostOp(const Node& node);

}  // namespace kiln::runtime
