// An attention mask that changes nothing, known at compile time, is
// dropped: an f32 mask of zeros (added to every score) or a bool mask of
// trues (masking none). The kernel then neither reads it nor adds it on
// every row, and the fill that made it need not run.
//
// Hugging Face models called without an attention mask build one of ones
// and turn it into an additive mask of zeros, which constant folding makes
// a constant; T5's cross-attention passes a position bias that is a fill
// of zeros ([1, heads, queries, keys]: a 32 MiB fill and 32 MiB read per
// layer at 1024 tokens).
#include <cstring>
#include <vector>

#include "runtime/compile/constant_persistence.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

constexpr char kAttention[] = "aten._scaled_dot_product_flash_attention_for_cpu.default";

// Whether a fill value is the mask element that changes nothing.
bool InertFill(const Arg& v, DType dtype) {
  switch (v.kind) {
    case Arg::Kind::kFloat:
      return dtype == DType::kF32 && v.f == 0.0;
    case Arg::Kind::kInt:
      return (dtype == DType::kF32 && v.i == 0) || (dtype == DType::kBool && v.i != 0);
    case Arg::Kind::kBool:
      return (dtype == DType::kF32 && !v.b) || (dtype == DType::kBool && v.b);
    default:
      return false;
  }
}

bool InertBytes(const void* data, const TensorMeta& meta) {
  if (data == nullptr || !CheckBeforeRead(data)) return false;
  const int64_t n = meta.NumElements();
  if (meta.dtype == DType::kF32) {
    const float* f = static_cast<const float*>(data);
    for (int64_t i = 0; i < n; ++i) {
      if (f[i] != 0.0f) return false;  // -0 adds nothing either; NaN is not inert
    }
    return true;
  }
  if (meta.dtype == DType::kBool) {
    const uint8_t* b = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) {
      if (b[i] == 0) return false;
    }
    return true;
  }
  return false;
}

// Whether every element of `ref` is inert, as far as the graph shows:
// a constant's bytes, or a fill, seen through ops that only move elements.
bool Inert(const PassContext& ctx, ValueRef ref) {
  const Graph& graph = ctx.graph;
  const DType dtype = graph.MetaOf(ref).dtype;
  for (;;) {
    const Node& node = graph.nodes[ref.node];
    if (node.kind == Node::Kind::kConstant) {
      return InertBytes(ctx.constant_data[ref.node], graph.MetaOf(ref));
    }
    if (node.kind != Node::Kind::kOp || ref.output != 0) return false;
    if ((node.target == "aten.full.default" || node.target == "aten.full_like.default") &&
        node.args.size() >= 2) {
      return node.outputs[0].dtype == dtype && InertFill(node.args[1], dtype);
    }
    const std::vector<ValueRef> inputs = TensorInputsOf(node);
    if (!HasTrait(node, kView) || inputs.size() != 1 ||
        graph.MetaOf(inputs[0]).dtype != dtype) {
      return false;
    }
    ref = inputs[0];
  }
}

}  // namespace

absl::Status DropInertAttentionMasks(PassContext& ctx) {
  for (Node& node : ctx.graph.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp || node.target != kAttention) continue;
    for (NamedArg& kw : node.kwargs) {
      if (kw.name == "attn_mask" && kw.value.kind == Arg::Kind::kTensor &&
          Inert(ctx, kw.value.tensor)) {
        kw.value = Arg{};  // None
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::runtime
