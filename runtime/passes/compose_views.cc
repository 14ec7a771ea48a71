// Chains of movement ops become one strided read of the chain's source.
//
// Every value in a compiled graph is dense, so each permute, slice,
// select or expand writes its own output: a chain such as
//   permute(x) -> slice -> slice
// (what functionalized indexing through a view leaves, all over
// Longformer's and BigBird's block attention) copies the whole permuted
// tensor to keep a small window of it. In eager those ops are views and
// only the consumer reads. Here each movement op's output is described as
// a strided view of the chain's source (sizes, strides, offset, in
// elements of the source's dense layout); a copying op whose view
// composes at least two copying ops becomes
//   aten.as_strided(source, sizes, strides, offset)
// and the copies it replaced die when nothing else reads them.
//
// Reshapes (view, unsqueeze, squeeze, flatten, alias) are free on dense
// values; on a strided view they compose only when the new shape can be
// expressed with strides (as ATen's view can), otherwise the chain starts
// again from their materialized input. A single copying op keeps its own
// kernel (the permute kernel tiles transposes), and every composed shape is
// checked against the node's inferred one: an op whose arguments the pass
// does not read exactly as written ends its chain rather than guessing.
//
// A bmm reads its operands' views where they lie instead (kiln.bmm, its
// views as arguments): oneDNN's batched matmul takes strided operands, so
// a head split's permute or a block gather feeding a product costs no copy
// at all. Broadcasts (stride 0) stay copies.
//
// Runs before the layout pass: values are plain row-major then.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/ir/arg_builders.h"
#include "runtime/ir/tensor_meta.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"

namespace kiln::runtime {
namespace {

// A node's output as a strided view of `source` (its dense elements).
struct StridedView {
  ValueRef source;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int copies = 0;  // copying movement ops composed into it
};

// Whether the view reads its elements in row-major order from `offset`
// on: then a reshape or as_strided of it is a reshape of the source.
bool IsRowMajor(const StridedView& v) {
  const std::vector<int64_t> dense = ContiguousStrides(v.sizes);
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    if (v.sizes[d] != 1 && v.strides[d] != dense[d]) return false;
  }
  return true;
}

std::optional<int64_t> IntOf(const Arg& a) {
  if (a.kind != Arg::Kind::kInt) return std::nullopt;
  return a.i;
}

std::optional<std::vector<int64_t>> IntsOf(const Arg& a) {
  if (a.kind != Arg::Kind::kList) return std::nullopt;
  std::vector<int64_t> out;
  for (const Arg& item : a.list) {
    if (item.kind != Arg::Kind::kInt) return std::nullopt;
    out.push_back(item.i);
  }
  return out;
}

std::optional<int> WrappedDim(const Arg& a, size_t rank) {
  const std::optional<int64_t> d = IntOf(a);
  const int64_t r = static_cast<int64_t>(rank);
  if (!d || *d < -r || *d >= r) return std::nullopt;
  return static_cast<int>(*d < 0 ? *d + r : *d);
}

// Strides giving `sizes` over the same elements in the same order as
// (old_sizes, old_strides), if any do: old dims that step over each
// other contiguously form runs, and every new dim must fall inside one.
std::optional<std::vector<int64_t>> ReshapedStrides(const std::vector<int64_t>& old_sizes,
                                                    const std::vector<int64_t>& old_strides,
                                                    const std::vector<int64_t>& sizes) {
  struct Run {
    int64_t size, inner;  // elements, stride of the innermost dim
  };
  std::vector<Run> runs;
  for (size_t d = 0; d < old_sizes.size(); ++d) {
    if (old_sizes[d] == 1) continue;
    if (!runs.empty() && runs.back().inner == old_strides[d] * old_sizes[d]) {
      runs.back().size *= old_sizes[d];
      runs.back().inner = old_strides[d];
    } else {
      runs.push_back({old_sizes[d], old_strides[d]});
    }
  }
  std::vector<int64_t> strides(sizes.size(), 1);
  int r = static_cast<int>(runs.size()) - 1;
  int64_t left = r >= 0 ? runs[r].size : 1, stride = r >= 0 ? runs[r].inner : 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = stride;
    if (sizes[d] == 1) continue;
    if (r < 0 || left % sizes[d] != 0) return std::nullopt;
    stride *= sizes[d];
    left /= sizes[d];
    if (left == 1 && --r >= 0) {
      left = runs[r].size;
      stride = runs[r].inner;
    }
  }
  if (r >= 0) return std::nullopt;
  return strides;
}

// `node` (an op reading `in`) applied to the view `in`: its output's view,
// or nullopt when it is no movement op the pass composes.
std::optional<StridedView> Apply(const Node& node, const StridedView& in) {
  const std::string& t = node.target;
  const std::vector<int64_t>& out_shape = node.outputs[0].shape;
  const size_t rank = in.sizes.size();
  StridedView v = in;
  if (t == "aten.view.default" || t == "aten.reshape.default" ||
      t == "aten._unsafe_view.default" || t == "aten.flatten.using_ints" ||
      t == "aten.unsqueeze.default" || t == "aten.squeeze.dim" || t == "aten.squeeze.dims" ||
      t == "aten.squeeze.default" || t == "aten.alias.default") {
    // The same elements in the same order, in the inferred shape.
    const std::optional<std::vector<int64_t>> strides =
        ReshapedStrides(in.sizes, in.strides, out_shape);
    if (!strides) return std::nullopt;
    v.sizes = out_shape;
    v.strides = *strides;
    return v;
  }
  if (t == "aten.permute.default" && node.args.size() == 2) {
    const std::optional<std::vector<int64_t>> dims = IntsOf(node.args[1]);
    if (!dims || dims->size() != rank) return std::nullopt;
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < rank; ++i) {
      const std::optional<int> d = WrappedDim(node.args[1].list[i], rank);
      if (!d || seen[*d]) return std::nullopt;
      seen[*d] = true;
      v.sizes[i] = in.sizes[*d];
      v.strides[i] = in.strides[*d];
    }
    ++v.copies;
    return v;
  }
  if (t == "aten.t.default" && node.args.size() == 1 && rank <= 2) {
    if (rank == 2) {
      std::swap(v.sizes[0], v.sizes[1]);
      std::swap(v.strides[0], v.strides[1]);
    }
    ++v.copies;
    return v;
  }
  if (t == "aten.slice.Tensor" && !node.args.empty() && node.args.size() <= 5) {
    const Arg none = NoneArg();
    const Arg& dim_arg = node.args.size() > 1 ? node.args[1] : none;
    const std::optional<int> dim = dim_arg.kind == Arg::Kind::kNone && rank > 0
                                       ? std::optional<int>(0)
                                       : WrappedDim(dim_arg, rank);
    if (!dim) return std::nullopt;
    const int64_t size = in.sizes[*dim];
    auto bound = [&](size_t pos, int64_t missing) -> std::optional<int64_t> {
      if (node.args.size() <= pos || node.args[pos].kind == Arg::Kind::kNone) return missing;
      return IntOf(node.args[pos]);
    };
    std::optional<int64_t> start = bound(2, 0), end = bound(3, size), step = bound(4, 1);
    if (!start || !end || !step || *step <= 0) return std::nullopt;
    // ATen's clamping: negative from the end, then into [0, size].
    if (*start < 0) *start += size;
    if (*end < 0) *end += size;
    *start = std::min(std::max<int64_t>(*start, 0), size);
    *end = std::min(std::max(*end, *start), size);
    v.sizes[*dim] = (*end - *start + *step - 1) / *step;
    v.offset += *start * in.strides[*dim];
    v.strides[*dim] *= *step;
    ++v.copies;
    return v;
  }
  if (t == "aten.select.int" && node.args.size() == 3) {
    const std::optional<int> dim = WrappedDim(node.args[1], rank);
    std::optional<int64_t> index = IntOf(node.args[2]);
    if (!dim || !index) return std::nullopt;
    const int64_t size = in.sizes[*dim];
    if (*index < 0) *index += size;
    if (*index < 0 || *index >= size) return std::nullopt;
    v.offset += *index * in.strides[*dim];
    v.sizes.erase(v.sizes.begin() + *dim);
    v.strides.erase(v.strides.begin() + *dim);
    ++v.copies;
    return v;
  }
  if (t == "aten.expand.default" && node.args.size() >= 2 && out_shape.size() >= rank) {
    // New leading dims and stretched size-1 dims read one element over.
    const size_t lead = out_shape.size() - rank;
    v.sizes = out_shape;
    v.strides.assign(out_shape.size(), 0);
    for (size_t d = 0; d < rank; ++d) {
      if (in.sizes[d] == out_shape[lead + d]) {
        v.strides[lead + d] = in.strides[d];
      } else if (in.sizes[d] != 1) {
        return std::nullopt;
      }
    }
    ++v.copies;
    return v;
  }
  if (t == "aten.as_strided.default" && node.args.size() >= 3 && node.args.size() <= 4 &&
      IsRowMajor(in)) {
    // Over a view that reads the source in order from its offset, as
    // as_strided reads its (dense) input.
    const std::optional<std::vector<int64_t>> sizes = IntsOf(node.args[1]);
    const std::optional<std::vector<int64_t>> strides = IntsOf(node.args[2]);
    std::optional<int64_t> offset = int64_t{0};
    if (node.args.size() == 4 && node.args[3].kind != Arg::Kind::kNone) {
      offset = IntOf(node.args[3]);
    }
    if (!sizes || !strides || !offset || sizes->size() != strides->size()) return std::nullopt;
    v.sizes = *sizes;
    v.strides = *strides;
    v.offset += *offset;
    ++v.copies;
    return v;
  }
  return std::nullopt;
}

bool ComposableDType(DType d) {
  // aten.as_strided's dtypes (ops.def).
  return d == DType::kF32 || d == DType::kI64 || d == DType::kBool;
}

// A bmm operand that is a view made by copies (copies >= 1), of a value
// computed at run time, as kiln.bmm's view argument: [B, M, K] sizes,
// strides and offset. Broadcast (stride 0) windows are left to the copies.
std::optional<Arg> BmmOperandView(const PassContext& ctx,
                                  const std::vector<std::optional<StridedView>>& views,
                                  ValueRef operand) {
  if (operand.output != 0 || !views[operand.node]) return std::nullopt;
  const StridedView& v = *views[operand.node];
  if (v.copies < 1 || v.sizes.size() != 3 || ctx.constant_data[v.source.node] != nullptr ||
      ctx.graph.MetaOf(v.source).dtype != DType::kF32) {
    return std::nullopt;
  }
  for (int64_t stride : v.strides) {
    if (stride < 1) return std::nullopt;
  }
  std::vector<int64_t> packed = v.sizes;
  packed.insert(packed.end(), v.strides.begin(), v.strides.end());
  packed.push_back(v.offset);
  return IntListArg(packed);
}

// bmm(view(x), view(y)) -> kiln.bmm(x, y, x's view, y's view): oneDNN's
// batched matmul reads strided operands where they lie, so the views'
// copies (a head split's permute, BigBird's and Longformer's block
// gathers) need not run. False when neither operand is such a view.
bool ReadBmmOperandsInPlace(const PassContext& ctx,
                            const std::vector<std::optional<StridedView>>& views, int kiln_bmm,
                            Node& node) {
  if (node.target != "aten.bmm.default" || node.args.size() != 2 ||
      node.args[1].kind != Arg::Kind::kTensor) {
    return false;
  }
  std::vector<Arg> args = node.args;
  bool any = false;
  for (int k = 0; k < 2; ++k) {
    const std::optional<Arg> view = BmmOperandView(ctx, views, node.args[k].tensor);
    if (view) {
      args[k] = TensorArg(views[node.args[k].tensor.node]->source);
      any = true;
    }
    args.push_back(view ? *view : NoneArg());
  }
  if (!any) return false;
  node.target = "kiln.bmm";
  node.op_index = kiln_bmm;
  node.args = std::move(args);
  return true;
}

}  // namespace

absl::Status ComposeViews(PassContext& ctx) {
  Graph& g = ctx.graph;
  const int as_strided = FindOp("aten.as_strided.default");
  const int kiln_bmm = FindOp("kiln.bmm");
  std::vector<std::optional<StridedView>> views(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& node = g.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp || node.outputs.size() != 1 ||
        node.args.empty() || node.args[0].kind != Arg::Kind::kTensor || !node.kwargs.empty()) {
      continue;
    }
    if (ReadBmmOperandsInPlace(ctx, views, kiln_bmm, node)) continue;
    const ValueRef x = node.args[0].tensor;
    const TensorMeta& in_meta = g.MetaOf(x);
    const TensorMeta& out_meta = node.outputs[0];
    if (!ComposableDType(in_meta.dtype) || out_meta.dtype != in_meta.dtype ||
        in_meta.NumElements() == 0 || out_meta.NumElements() == 0) {
      continue;
    }
    StridedView in;
    if (x.output == 0 && views[x.node]) {
      in = *views[x.node];
    } else {
      in.source = x;
      in.sizes = in_meta.shape;
      in.strides = ContiguousStrides(in_meta.shape);
    }
    std::optional<StridedView> v = Apply(node, in);
    if (!v || v->sizes != out_meta.shape) continue;
    views[i] = std::move(v);
    const StridedView& view = *views[i];
    if (view.copies < 2 || OpOf(node)->traits.Has(kAlias)) continue;
    // One read of the source instead of the chain's copies.
    std::vector<Arg> args = {TensorArg(view.source), IntListArg(view.sizes),
                             IntListArg(view.strides), IntArg(view.offset)};
    node.target = "aten.as_strided.default";
    node.op_index = as_strided;
    node.args = std::move(args);
  }
  EliminateDeadNodes(g);
  return absl::OkStatus();
}

}  // namespace kiln::runtime
