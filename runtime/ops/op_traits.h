// What compile passes, the capabilities RPC and the client's partitioner
// know about an op besides its kernel: its traits, declared once with the
// op in ops.def. Passes ask them (HasTrait and friends in ops/registry.h)
// and never keep lists of op names, so an op declared with the traits of
// the ops it resembles is fused, aliased and laid out like them.
//
// A trait is a promise about the op's kernel that passes then rely on:
// mark an op only with a test showing it behaves so.
//
// Kiln's own fused ops ("kiln.*") also declare their arguments by name;
// code that builds or reads them refers to an argument through KILN_ARG
// (ops/op_table.h), which finds its position at compile time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/ir/graph.h"
#include "runtime/ops/elementwise_program.h"

namespace kiln::runtime {

class NodeArgs;
struct EwRecipe;

enum OpTrait : uint32_t {
  // Its one output holds its one input's bytes unchanged whenever both are
  // dense, as every value in a compiled graph is: the memory plan gives it
  // its input's bytes and it runs no kernel (reshapes, squeezes, clone:
  // the graph is functional, so a copy would be byte for byte).
  kAlias = 1u << 0,
  // Moves elements and computes none (reshapes, permutes, broadcasts,
  // copies): a partition made of nothing else is not worth a call to the
  // daemon (the client's partitioner reads it through capabilities).
  kView = 1u << 1,
  // A reshape to the size list in its argument 1 (aten.view and its
  // spellings): the same elements, in order. Passes look through it.
  kReshape = 1u << 2,
  // Every output element is computed from the same-position elements of
  // its (broadcast) inputs, so it runs unchanged on values in any
  // activation layout (it follows every layout, below).
  kElementwise = 1u << 3,
  // The layout pass (passes/channels_last.cc) runs it on activations in
  // the channels-last (NHWC) or blocked layout, given such inputs.
  kFollowsNhwc = 1u << 4,
  kFollowsBlocked = 1u << 5,
  // Effects beyond its outputs: never removed as dead. No op has it yet:
  // every kernel is a function of its inputs (as_strided_ included, which
  // Kiln computes as a new value).
  kSideEffects = 1u << 6,
};
inline constexpr uint32_t kFollowsLayout = kFollowsNhwc | kFollowsBlocked;

// The traits' names, bit by bit, as capabilities (OpSupport.traits) and
// docs give them. The static_assert keeps the table in step with the enum.
inline constexpr int kNumTraitFlags = 7;
inline constexpr const char* kTraitFlagNames[kNumTraitFlags] = {
    "alias", "view", "reshape", "elementwise", "follows_nhwc", "follows_blocked", "side_effects",
};
static_assert(kSideEffects == 1u << (kNumTraitFlags - 1),
              "a trait added to OpTrait needs its name in kTraitFlagNames");

// The scalar function of a fusible elementwise op: appends to `recipe` the
// kiln.elementwise instructions (ops/elementwise_program.h) that
// compute one call of it, reading its arguments as its prepare function
// does. `self`, its first operand, is already recipe->tensors[0]. False
// when this call cannot be fused (an argument the instructions cannot
// express).
using EwRecipeFn = bool (*)(const NodeArgs& args, EwOperand self, EwRecipe* recipe);

// The post-op (kernels/post_ops.h) one call of an activation becomes, or
// "" when its arguments leave none.
using PostOpFn = std::string (*)(const Node& node);

// One op's traits. Built in ops.def with the constexpr helpers below:
//   Traits(kAlias | kView)
//   Elementwise(EwOp::kRelu).AsPostOp("relu")
//   Traits(kFollowsLayout).LayoutForm("kiln.avg_pool2d_nhwc")
//   Args("input, weight, bias")
struct OpTraits {
  uint32_t flags = 0;
  // Fusible elementwise ops (kElementwise): the scalar function, as one
  // instruction of `ew_op` applied to the op's input (unary ops without
  // other arguments) or as `ew_recipe`. Elementwise ops with neither are
  // not fused into kiln.elementwise.
  int ew_op = -1;  // an EwOp
  EwRecipeFn ew_recipe = nullptr;
  // Activations a convolution, matmul or batch norm can apply to its
  // output (kernels/post_ops.h, which maps each to its oneDNN algorithm):
  // `post_op` for a call with the input alone and no keyword arguments,
  // `post_op_fn` when the arguments decide.
  const char* post_op = nullptr;
  PostOpFn post_op_fn = nullptr;
  // The internal op that computes it on activations in the layout the
  // layout pass chose (with the same arguments, bar those the pass maps):
  // aten.avg_pool2d -> kiln.avg_pool2d_nhwc.
  const char* layout_form = nullptr;
  // Internal ops: argument names in positional order, comma-separated; a
  // name ending in "..." stands for any number of tensors (only last but
  // one). Read through KILN_ARG.
  const char* args = nullptr;
  // The tensor argument (by position) whose bytes the op's one output may
  // take over when nothing reads them afterwards (plan/in_place.h): the
  // output is that input with some elements replaced or added to, and the
  // kernel skips copying it when the two share memory. -1: none.
  int overwrites = -1;

  constexpr bool Has(uint32_t trait) const { return (flags & trait) == trait; }
  constexpr bool Fusible() const { return ew_op >= 0 || ew_recipe != nullptr; }
  constexpr bool IsPostOp() const { return post_op != nullptr || post_op_fn != nullptr; }

  constexpr OpTraits With(uint32_t trait) const {
    OpTraits t = *this;
    t.flags |= trait;
    return t;
  }
  constexpr OpTraits AsPostOp(const char* name) const {
    OpTraits t = *this;
    t.post_op = name;
    return t;
  }
  constexpr OpTraits AsPostOp(PostOpFn fn) const {
    OpTraits t = *this;
    t.post_op_fn = fn;
    return t;
  }
  constexpr OpTraits LayoutForm(const char* target) const {
    OpTraits t = *this;
    t.layout_form = target;
    return t;
  }
  constexpr OpTraits Overwrites(int pos) const {
    OpTraits t = *this;
    t.overwrites = pos;
    return t;
  }
  constexpr OpTraits Args(const char* names) const {
    OpTraits t = *this;
    t.args = names;
    return t;
  }
};

constexpr OpTraits Traits(uint32_t flags = 0) { return OpTraits().With(flags); }
// An elementwise op that is not fused into kiln.elementwise.
constexpr OpTraits Elementwise() { return Traits(kElementwise); }
constexpr OpTraits Elementwise(EwOp op) {
  OpTraits t = Elementwise();
  t.ew_op = static_cast<int>(op);
  return t;
}
constexpr OpTraits Elementwise(EwRecipeFn recipe) {
  OpTraits t = Elementwise();
  t.ew_recipe = recipe;
  return t;
}
constexpr OpTraits Args(const char* names) { return Traits().Args(names); }

// Whether an op with `traits` follows activation layout `nhwc_or_blocked`
// (kFollowsNhwc or kFollowsBlocked).
constexpr bool FollowsLayout(const OpTraits& traits, uint32_t nhwc_or_blocked) {
  return traits.Has(kElementwise) || traits.Has(nhwc_or_blocked);
}

// ---- Argument schemas ------------------------------------------------------

// An argument of an internal op: its position and name (as NodeArgs reads
// arguments).
struct ArgSlot {
  size_t pos;  // an index into Node::args
  const char* name;
};

namespace schema_internal {

constexpr bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t'; }

// The i-th name of comma-separated `names` ("" past the end).
constexpr std::string_view NthArg(std::string_view names, int i) {
  size_t begin = 0;
  for (int k = 0;; ++k) {
    size_t end = names.find(',', begin);
    if (end == std::string_view::npos) end = names.size();
    if (k == i) {
      size_t b = begin, e = end;
      while (b < e && IsSpace(names[b])) ++b;
      while (e > b && IsSpace(names[e - 1])) --e;
      return names.substr(b, e - b);
    }
    if (end == names.size()) return {};
    begin = end + 1;
  }
}

constexpr int NumArgs(std::string_view names) {
  int n = 0;
  while (!NthArg(names, n).empty()) ++n;
  return n;
}

}  // namespace schema_internal
}  // namespace kiln::runtime
