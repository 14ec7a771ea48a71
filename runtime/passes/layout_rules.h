// What the layout pass (passes/channels_last.cc) knows of each op and
// shape: which ops run in a layout (their traits), which shapes read the
// same in both orders, and which values a convolution would rather
// receive in the layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/ir/graph.h"
#include "runtime/kernels/activation_layout.h"
#include "runtime/passes/channel_shuffle_match.h"

namespace kiln::runtime::channels_last {

using Layout = ActivationLayout;

// Logical NCHW dimension d lives at kToPhysical[d] of the NHWC shape.
inline constexpr std::array<int, 4> kToPhysical = {0, 3, 1, 2};
// Physical NHWC position p holds logical dimension kToLogical[p].
inline constexpr std::array<int, 4> kToLogical = {0, 2, 3, 1};

// The argument at (pos, name), positional or keyword; null when absent.
Arg* FindArg(Node& node, size_t pos, const char* name);

// Dimension `d` of a rank-`rank` value, negative ones counted from the end.
int WrapDim(int64_t d, int rank);

// The shape a plain broadcast operand (rank <= 4, left-padded) takes to
// broadcast the same way against values in `layout`; nullopt when its
// bytes would have to move. Channels-last: shapes whose bytes read the
// same in both orders, permuted. Blocked: a per-pixel operand
// [n, 1, h, w] as [n, 1, h, w, 1]; a per-channel one [n, c, 1, 1] as
// [n, c/8, 1, 1, 8].
std::optional<std::vector<int64_t>> BroadcastShape(const TensorMeta& meta, Layout layout);

// Moves node n's dimension argument (at `pos`, named `name`, default 0)
// to where that dimension of a rank-4 value sits in `layout`. Blocked: N,
// C (in whole blocks), H and W keep their positions. False when it is not
// an int naming one of the four dimensions.
bool RemapDim(Node& n, size_t pos, const char* name, Layout layout);

// `shape` (rank <= 4) left-padded with ones to rank 4.
std::vector<int64_t> Padded4(const std::vector<int64_t>& shape);

// A rank-4 (or lower, read as left-padded to rank 4) shape whose NCHW
// order and `layout` are the same bytes: C == 1 or H * W == 1 for NHWC;
// H * W == 1 with whole blocks of channels for the blocked layout.
bool LayoutAmbiguous(const std::vector<int64_t>& shape, Layout layout);

// Ops the rewriter can run in `layout` (given such inputs): those whose
// traits say they follow it (ops/op_traits.h).
bool RunsInLayout(const Node& node, Layout layout);

// permute(x, dims) with dims [0, 2, 3, 1] (or its negative spelling).
bool IsToNhwc(const Node& node);

// split_with_sizes or slice of a rank-4 f32 tensor: in NHWC, the same
// along the dim's new position (its dim argument at SplitDimPos).
bool IsSplit(const Graph& g, const Node& n);
size_t SplitDimPos(const Node& n);

// Per value: whether a convolution (directly or through ops that follow
// the layout) reads it, so that producing it in `layout` saves a reorder.
// A convolution whose output only reaches ops that need NCHW keeps a plain
// output (its kernel reorders internally): converting it with a separate
// node would cost the same and add a step. `shuffles`: the channel
// shuffles the layout keeps (FindShuffles; none for the blocked layout).
std::vector<std::vector<bool>> WantsLayout(const Graph& g, Layout layout,
                                           const absl::flat_hash_map<int, ShuffleChain>& shuffles);

}  // namespace kiln::runtime::channels_last
