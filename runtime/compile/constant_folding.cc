#include "runtime/compile/constant_folding.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "runtime/compile/compiled_graph.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/node_prepare.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/ops/registry.h"
#include "runtime/util/large_alloc.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

namespace {

// The bytes of `arena`, owned from now on (freed as the arena would have
// freed them); the first `size` of them are the value.
ConstantData Owned(RunArena& arena, int64_t size) {
  uint8_t* bytes = arena.data;
  arena.data = nullptr;
  return ConstantData{std::shared_ptr<const uint8_t>(bytes,
                                                     [alloc = arena.size](const uint8_t* p) {
                                                       FreeLarge(const_cast<uint8_t*>(p), alloc);
                                                     }),
                      size};
}

// Which ops fold: inputs constants or folded, result small enough, no
// side effects, only the first output read.
std::vector<bool> Foldable(const PassContext& ctx, const Uses& uses) {
  const Graph& graph = ctx.graph;
  std::vector<bool> foldable(graph.nodes.size(), false);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp || node.outputs.empty() ||
        node.outputs[0].ByteSize() > kMaxFoldedBytes || HasTrait(node, kSideEffects)) {
      continue;
    }
    bool ok = true;
    for (const ValueRef& ref : TensorInputsOf(node)) {
      ok = ok && ref.output == 0 && (ctx.constant_data[ref.node] != nullptr || foldable[ref.node]);
    }
    // A training-mode batch norm that standardizes a weight (NF-Nets'
    // scaled weight-standardized convolutions) leaves its saved mean and
    // invstd unread; folding it is what lets the convolution pack a
    // constant weight.
    for (size_t o = 1; o < node.outputs.size(); ++o) {
      ok = ok && uses.Count(ValueRef{static_cast<int>(i), static_cast<int>(o)}) == 0;
    }
    foldable[i] = ok;
  }
  return foldable;
}

}  // namespace

absl::Status FoldConstants(PassContext& ctx) {
  Graph& graph = ctx.graph;
  const int n = static_cast<int>(graph.nodes.size());
  const Uses uses = ComputeUses(graph);
  const std::vector<bool> foldable = Foldable(ctx, uses);

  // The values a run reads become constants; the rest of each chain is
  // computed here and dropped.
  std::vector<bool> keep(n, false);
  for (int i = 0; i < n; ++i) {
    if (!foldable[i]) continue;
    bool read_at_run = uses.is_output[i][0];
    for (int user : uses.users[i][0]) read_at_run = read_at_run || !foldable[user];
    const Node& node = graph.nodes[i];
    keep[i] = read_at_run && (!TensorInputsOf(node).empty() ||
                              node.outputs[0].ByteSize() <= kMaxFoldedSourceBytes);
  }

  // Every folded value's key, from its inputs' keys (FoldDescription reads
  // them off the nodes), before anything runs: a value found by key needs
  // none of the chain behind it.
  for (int i = 0; i < n; ++i) {
    if (!foldable[i]) continue;
    const std::string description = FoldDescription(graph, graph.nodes[i]);
    graph.nodes[i].share_key = description.empty() ? "" : DerivedConstantKey(description);
  }
  ConstantPersistence* persistence = CurrentPersistence();
  auto become_constant = [&](int i, SharedConstant folded) {
    Node& node = graph.nodes[i];
    ctx.constant_data[i] = folded.data.bytes.get();
    ctx.created.push_back(std::move(folded.data));
    node.kind = Node::Kind::kConstant;
    node.outputs = std::move(folded.outputs);
  };
  std::vector<bool> needed(n, false);
  for (int i = 0; i < n; ++i) {
    if (!keep[i]) continue;
    const std::string& key = graph.nodes[i].share_key;
    if (!key.empty()) {
      if (std::optional<SharedConstant> live = FindShared(key)) {
        become_constant(i, *std::move(live));
        continue;
      }
      if (persistence != nullptr) {
        const TensorMeta meta = graph.nodes[i].outputs[0];
        if (std::optional<ConstantData> saved =
                persistence->Load(key, meta.ByteSize(), /*defer_check=*/true)) {
          become_constant(i, PublishShared(key, SharedConstant{*std::move(saved), {meta}}));
          continue;
        }
      }
    }
    needed[i] = true;
  }
  // What the missing ones are computed from, and how many computations
  // read each (an intermediate is freed after its last).
  std::vector<int> reads_left(n, 0);
  for (int i = n - 1; i >= 0; --i) {
    if (!needed[i]) continue;
    for (const ValueRef& ref : TensorInputsOf(graph.nodes[i])) {
      if (!foldable[ref.node] || graph.nodes[ref.node].kind == Node::Kind::kConstant) continue;
      needed[ref.node] = true;
      ++reads_left[ref.node];
    }
  }

  absl::flat_hash_map<const void*, ConstantData> owners;
  for (const ConstantData& c : ctx.created) owners.emplace(c.bytes.get(), c);
  std::vector<ConstantData> value(n);  // intermediates, while read
  for (int i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    Node& node = graph.nodes[i];
    const std::vector<ValueRef> refs = TensorInputsOf(node);
    std::vector<ConstantData> in_data;
    for (const ValueRef& ref : refs) {
      if (graph.nodes[ref.node].kind == Node::Kind::kConstant) {
        const void* bytes = ctx.constant_data[ref.node];
        if (!CheckBeforeRead(bytes)) return BadSavedConstant(node);
        auto owner = owners.find(bytes);
        if (owner != owners.end()) {
          in_data.push_back(owner->second);
        } else {  // read, never shared: nothing here owns it
          in_data.push_back(ConstantData{
              std::shared_ptr<const uint8_t>(std::shared_ptr<const uint8_t>(),
                                             static_cast<const uint8_t*>(bytes)),
              -1});
        }
      } else {
        in_data.push_back(value[ref.node]);
      }
    }
    KILN_ASSIGN_OR_RETURN(PreparedOp prepared,
                          PrepareNode(graph, node, ctx.constant_data, /*shape_only=*/false));
    const TensorMeta meta = prepared.outputs[0];
    ConstantData result;
    if (HasTrait(node, kAlias) && refs.size() == 1 && in_data[0].bytes != nullptr &&
        in_data[0].size == meta.ByteSize()) {
      // Its input's bytes unchanged (ops/op_traits.h): share them.
      result = in_data[0];
    } else {
      std::vector<TensorView> in, out;
      std::vector<std::unique_ptr<RunArena>> buffers;
      for (size_t k = 0; k < refs.size(); ++k) {
        in.push_back({const_cast<uint8_t*>(in_data[k].bytes.get()), &graph.MetaOf(refs[k])});
      }
      // Every output gets memory to be written to; the first is kept.
      for (const TensorMeta& m : prepared.outputs) {
        buffers.push_back(std::make_unique<RunArena>(m.ByteSize()));
        out.push_back({buffers.back()->data, &m});
      }
      RunArena scratch(static_cast<int64_t>(prepared.kernel->ScratchBytes()));
      KILN_RETURN_IF_ERROR(prepared.kernel->Run(KernelContext{in, out, scratch.data}));
      result = Owned(*buffers[0], meta.ByteSize());
    }
    for (const ValueRef& ref : refs) {
      if (needed[ref.node] && --reads_left[ref.node] == 0) value[ref.node] = ConstantData{};
    }
    if (!keep[i]) {
      value[i] = std::move(result);
      continue;
    }
    const std::string& key = node.share_key;
    SharedConstant folded{std::move(result), {meta}};
    if (!key.empty() && persistence != nullptr) persistence->Save(key, folded.data);
    owners.emplace(folded.data.bytes.get(), folded.data);
    become_constant(i, key.empty() ? std::move(folded) : PublishShared(key, std::move(folded)));
  }
  // Keys belong to constants; ops left in place (large fills) and dropped
  // intermediates carry none.
  for (int i = 0; i < n; ++i) {
    if (foldable[i] && !keep[i]) graph.nodes[i].share_key.clear();
  }
  return absl::OkStatus();
}

// Constants the passes built with a share key (batch-norm folds) become
// the live ones other compiled graphs built from the same inputs, if any,
// before any kernel reads them; and are saved for warm starts when the
// compile persists.
void ShareDerivedConstants(PassContext& ctx) {
  ConstantPersistence* persistence = CurrentPersistence();
  absl::flat_hash_map<const void*, ConstantData> owners;
  for (const ConstantData& c : ctx.created) owners.emplace(c.bytes.get(), c);
  for (size_t i = 0; i < ctx.graph.nodes.size(); ++i) {
    const Node& node = ctx.graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kConstant || node.share_key.empty() ||
        node.constant_hash.size() > 0) {
      continue;
    }
    auto owner = owners.find(ctx.constant_data[i]);
    if (owner == owners.end()) continue;
    if (persistence != nullptr) persistence->Save(node.share_key, owner->second);
    SharedConstant shared =
        PublishShared(node.share_key, SharedConstant{owner->second, node.outputs});
    if (shared.data.bytes.get() != ctx.constant_data[i]) {
      ctx.constant_data[i] = shared.data.bytes.get();
      ctx.created.push_back(std::move(shared.data));
    }
  }
}

}  // namespace kiln::runtime
