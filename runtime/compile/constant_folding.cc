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
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

bool AllInputsConstant(const PassContext& ctx, const Node& node) {
  std::vector<ValueRef> refs = TensorInputsOf(node);
  if (refs.empty()) return false;
  for (const ValueRef& ref : refs) {
    if (ctx.constant_data[ref.node] == nullptr || ref.output != 0) return false;
  }
  return true;
}

// Runs an op whose inputs are all constants once, now, and turns the node
// into a constant holding its result.
absl::Status FoldNode(PassContext& ctx, int i) {
  Node& node = ctx.graph.nodes[i];
  const std::string description = FoldDescription(ctx.graph, node);
  const std::string key = description.empty() ? "" : DerivedConstantKey(description);
  auto use = [&](SharedConstant folded) {
    ctx.constant_data[i] = folded.data.bytes.get();
    ctx.created.push_back(std::move(folded.data));
    node.kind = Node::Kind::kConstant;
    node.share_key = key;
    node.outputs = std::move(folded.outputs);
  };
  ConstantPersistence* persistence = key.empty() ? nullptr : CurrentPersistence();
  if (!key.empty()) {
    if (std::optional<SharedConstant> done = FindShared(key)) {
      use(*std::move(done));
      return absl::OkStatus();
    }
    // The shape sweep inferred the outputs; only the first is kept.
    if (persistence != nullptr) {
      if (std::optional<ConstantData> saved =
              persistence->Load(key, node.outputs[0].ByteSize(), /*defer_check=*/true)) {
        use(PublishShared(key, SharedConstant{*std::move(saved), {node.outputs[0]}}));
        return absl::OkStatus();
      }
    }
  }
  for (const ValueRef& ref : TensorInputsOf(node)) {
    if (!CheckBeforeRead(ctx.constant_data[ref.node])) return BadSavedConstant(node);
  }
  KILN_ASSIGN_OR_RETURN(PreparedOp prepared,
                        PrepareNode(ctx.graph, node, ctx.constant_data, /*shape_only=*/false));
  std::vector<TensorView> in, out;
  std::vector<std::unique_ptr<RunArena>> buffers;
  for (const ValueRef& ref : TensorInputsOf(node)) {
    in.push_back({const_cast<void*>(ctx.constant_data[ref.node]), &ctx.graph.MetaOf(ref)});
  }
  // Every output gets memory to be written to; the first is kept (the
  // caller checked that nothing reads the others).
  for (const TensorMeta& meta : prepared.outputs) {
    buffers.push_back(std::make_unique<RunArena>(meta.ByteSize()));
    out.push_back({buffers.back()->data, &meta});
  }
  RunArena scratch(static_cast<int64_t>(prepared.kernel->ScratchBytes()));
  KILN_RETURN_IF_ERROR(prepared.kernel->Run(KernelContext{in, out, scratch.data}));
  SharedConstant folded{ConstantData{std::shared_ptr<const uint8_t>(
                                         buffers[0]->data,
                                         [](const uint8_t* p) { std::free(const_cast<uint8_t*>(p)); }),
                                     prepared.outputs[0].ByteSize()},
                        {prepared.outputs[0]}};
  buffers[0]->data = nullptr;  // ownership moved to `folded`
  if (persistence != nullptr) persistence->Save(key, folded.data);
  use(key.empty() ? std::move(folded) : PublishShared(key, std::move(folded)));
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
