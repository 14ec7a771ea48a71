// What compile passes work on: the graph with every node's output metas
// inferred, and the bytes of every constant (client constants and those
// the passes create, which the compiled graph then owns).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "runtime/compile/constant_data.h"
#include "runtime/ir/graph.h"

namespace kiln::runtime {

struct PassContext {
  Graph& graph;
  // Per node: data of a constant node (or a folded op), else null.
  std::vector<const void*>& constant_data;
  // Constants created by passes, kept alive with the compiled graph.
  std::vector<ConstantData>& created;

  // Appends a constant node holding a copy of `bytes`; returns its index.
  // `share_key` (compile/shared_constants.h) says what the bytes are when
  // the pass can tell (DerivedConstantKey of how it computed them); the
  // compiler then shares them with other compiled graphs.
  int AddConstant(const std::string& name, const TensorMeta& meta, const void* bytes,
                  const std::string& share_key = "");
  // Appends a constant node whose meta.ByteSize() bytes are left for the
  // caller to fill (before anything reads them): a pass computing a large
  // constant writes it once, in place. Returns its index and the bytes.
  std::pair<int, void*> AddUninitializedConstant(const std::string& name,
                                                 const TensorMeta& meta,
                                                 const std::string& share_key = "");
  // The bytes of the derived constant `share_key`, meta.ByteSize() of them,
  // when some compiled graph holds them or the compile's persistence saved
  // them (compile/constant_persistence.h): a pass need not compute them.
  std::optional<ConstantData> FindDerived(const std::string& share_key, const TensorMeta& meta);
  // Appends a constant node holding `data` (from FindDerived); returns its
  // index.
  int AddFoundConstant(const std::string& name, const TensorMeta& meta,
                       const std::string& share_key, ConstantData data);
};

// Every use of each value: (user node, position in TensorInputsOf(user)),
// plus whether the value is a graph output. Live nodes only.
struct Uses {
  std::vector<std::vector<std::vector<int>>> users;  // [node][output] -> user nodes
  std::vector<std::vector<bool>> is_output;          // [node][output]
  int Count(ValueRef v) const {
    return static_cast<int>(users[v.node][v.output].size()) + (is_output[v.node][v.output] ? 1 : 0);
  }
};
Uses ComputeUses(const Graph& graph);

// Whether `a` is a list of exactly the ints `values` (a stride of [1, 1]).
bool IsIntList(const Arg& a, std::initializer_list<int64_t> values);

// Rewrites every tensor argument of live nodes and every graph output that
// refers to `from` to refer to `to`.
void ReplaceAllUses(Graph& graph, ValueRef from, ValueRef to);

// The passes, in the order the compiler runs them. Each keeps the graph
// valid (metas inferred, references pointing at live nodes).
// Repeated computations (same op, same values, same arguments) -> one.
absl::Status EliminateCommonSubexpressions(PassContext& ctx);
absl::Status FoldBatchNorm(PassContext& ctx);
// mm / addmm of a transposed constant -> kiln.addmm reading the constant as
// it is (before folding, which would otherwise copy it transposed).
absl::Status AbsorbWeightTranspose(PassContext& ctx);
// An attention mask known to change nothing (f32 zeros, bool trues) ->
// no mask.
absl::Status DropInertAttentionMasks(PassContext& ctx);
// cat inputs with no elements dropped; a cat of one input -> its alias.
absl::Status DropEmptyCatInputs(PassContext& ctx);
// Chains of movement ops (permute, slice, select, expand, reshapes) -> one
// aten.as_strided of the chain's source.
absl::Status ComposeViews(PassContext& ctx);
absl::Status FuseConvPostOps(PassContext& ctx);
// A zero constant_pad_nd of a kiln.conv2d's input over its spatial dims ->
// the convolution's padding, four-sided where the pad is uneven.
absl::Status FoldConvPadding(PassContext& ctx);
absl::Status FuseMatmulPostOps(PassContext& ctx);
// Chains and trees of f32 elementwise ops -> kiln.elementwise (after the
// post-op passes, which take the activations they can).
absl::Status FuseElementwise(PassContext& ctx);
// Rebuilds the node list with activations between convolutions in
// channels-last order; op output metas must be inferred again afterwards.
absl::Status PropagateChannelsLast(PassContext& ctx);
// Activations after a kiln.batch_norm_nhwc -> its post_ops (so after
// PropagateChannelsLast).
absl::Status FuseBatchNormActivation(PassContext& ctx);
// Channels-last channel shuffles of a cat of two halves, and the split
// after them -> kiln.interleave_channels (after metas were inferred again
// following PropagateChannelsLast).
absl::Status FuseChannelShuffle(PassContext& ctx);
// mean -> 1x1 convolution -> 1x1 convolution -> mul squeeze-excitation
// blocks -> kiln.squeeze_excite (after metas were inferred again
// following PropagateChannelsLast).
absl::Status FuseSqueezeExcite(PassContext& ctx);
// 1x1 convolution -> 3x3 depthwise convolution pairs, both channels-last
// (so after PropagateChannelsLast) -> kiln.conv2d_dw, where that pays.
absl::Status FuseConvDepthwise(PassContext& ctx);
// DATA_LOSS for a pass that found a constant it must read bad
// (CheckBeforeRead): the compile is redone without that copy.
absl::Status BadSavedConstant(const Node& node);
// Marks op nodes none of whose outputs are used as dead, bar ops with side
// effects (ops/op_traits.h).
void EliminateDeadNodes(Graph& graph);

}  // namespace kiln::runtime
