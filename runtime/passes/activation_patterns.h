// Recognizes activations that lowering decomposed into several ATen nodes,
// so the post-op passes can fuse them whole. torch's core ATen
// decompositions (torch 2.14) write
//   silu(x)        sigmoid(x) -> mul(x, s)
//   hardswish(x)   add(x, 3) -> clamp(., 0) -> clamp(., None, 6)
//                  -> mul(x, .) -> div(., 6)
//   hardsigmoid(x) add(x, 3) -> clamp(., 0) -> clamp(., None, 6) -> div(., 6)
// The matcher also takes the spellings other lowerings produce: the two
// mul operands in either order, one clamp(., 0, 6) or hardtanh(., 0, 6)
// instead of two clamps, x * (clamp / 6), and mul by 1/6 instead of div
// by 6.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/ir/graph.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {

struct ActivationMatch {
  std::string post_op;     // as in kernels/post_ops.h: "silu", "hardswish", ...
  int last = -1;           // the node whose output is the activation's result
  std::vector<int> nodes;  // every node of the pattern, `last` included
};

// Matches a decomposed activation applied to `value`. Every use of `value`
// must be inside the pattern (and `value` no graph output), and every
// intermediate node must feed only the next node of the pattern, so the
// whole pattern can be replaced by its last node. `uses` must describe
// `graph`'s live nodes.
// The post-op string for an activation node (its op's post-op trait in
// ops.def and its literal arguments, kernels/post_ops.h), or "" when the
// node is not a fusable activation.
std::string ActivationPostOp(const Node& node);

std::optional<ActivationMatch> MatchDecomposedActivation(const Graph& graph, const Uses& uses,
                                                         ValueRef value);

// The activation applied to `value` next, whole: a decomposed one (above)
// or a single activation node (ActivationPostOp) that
// is `value`'s only use and reads it as its first argument (`nodes` is
// that node). What the post-op passes fuse, one activation at a time.
std::optional<ActivationMatch> MatchActivation(const Graph& graph, const Uses& uses,
                                               ValueRef value);

// The post-op passes' shared steps. AbsorbActivation takes activation `m`
// that reads node *cur into a fused op: its post-op is appended to
// `post_ops` (a list), its nodes and *cur die, their names join *name, and
// *cur moves to its last node, whose place the fused op takes.
void AbsorbActivation(Graph& graph, const ActivationMatch& m, Arg* post_ops, std::string* name,
                      int* cur);
// Makes node `at` the fused op (`target` at `op_index` with `args`, one
// output `out`), live again: it takes the place of the chain's last node.
void BecomeFused(Graph& graph, int at, const char* target, int op_index, std::vector<Arg> args,
                 std::string name, const TensorMeta& out);

}  // namespace kiln::runtime
