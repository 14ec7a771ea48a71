#include "runtime/compile/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/compile/constant_folding.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/node_prepare.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/compile/step_planning.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"
#include "runtime/plan/in_place.h"
#include "runtime/plan/joined_in_place.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/plan/waves.h"
#include "runtime/util/large_alloc.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

RunArena::RunArena(int64_t bytes)
    : size(static_cast<size_t>((std::max<int64_t>(bytes, 64) + 63) / 64 * 64)) {
  data = static_cast<uint8_t*>(AllocateLarge(size));
  // Kernels write through `data` unchecked: no arena is no run (the
  // daemon turns this into RESOURCE_EXHAUSTED for the one request).
  if (data == nullptr) throw std::bad_alloc();
}

RunArena::~RunArena() { FreeLarge(data, size); }

namespace {

constexpr char kBadSavedConstant[] =
    "a constant saved in the cache directory failed its checksum (removed; compile again)";

}  // namespace

namespace {

constexpr char kMissingConstantsPayload[] = "kiln/missing-constants";

}  // namespace

absl::Status MissingConstantsError(const std::string& first,
                                   const std::vector<std::string>& hashes) {
  const size_t count = hashes.size();
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      first, count > 1 ? absl::StrCat(" and ", count - 1, " more constants") : "",
      " not in the daemon's store (upload them first)"));
  std::vector<std::string> unique(hashes);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  status.SetPayload(kMissingConstantsPayload, absl::Cord(absl::StrJoin(unique, "\n")));
  return status;
}

std::vector<std::string> MissingConstantsOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) return {};
  auto payload = status.GetPayload(kMissingConstantsPayload);
  if (!payload || payload->empty()) return {};
  return absl::StrSplit(std::string(*payload), '\n');
}

namespace {

// A compile's working state, from its constants to the graph its passes
// leave; Lower turns it into the compiled graph.
struct CompileState {
  CompileState() : reads_scope(&reads) {}
  CompileState(const CompileState&) = delete;
  CompileState& operator=(const CompileState&) = delete;

  // Sets `*into` to the milliseconds since the previous lap.
  void Lap(double* into) {
    const auto now = std::chrono::steady_clock::now();
    *into = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  }

  std::unique_ptr<CompiledGraph> cg = std::make_unique<CompiledGraph>();
  CompileReads reads;
  CompileReadsScope reads_scope;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  Graph graph;
  // Per node: the bytes of a constant node, else null.
  std::vector<const void*> constant_data;
  // Every constant's bytes, kept alive: the client's first
  // (resolved[0, client_constants)), then those derived from them.
  std::vector<ConstantData> resolved;
  size_t client_constants = 0;
};

// 1. Client constants by store hash: prepare functions and passes read
// their bytes. Every one is looked up before failing, so the client learns
// of all the missing ones at once (a store backed by files drops bad ones
// on lookup).
absl::Status ResolveClientConstants(CompileState& s, const ConstantResolver& resolve) {
  Graph& graph = s.graph;
  s.constant_data.assign(graph.nodes.size(), nullptr);
  std::string first_missing;
  std::vector<std::string> missing;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.kind == Node::Kind::kInput) {
      s.cg->input_metas.push_back(node.outputs[0]);
    } else if (node.kind == Node::Kind::kConstant && !node.constant_hash.empty()) {
      auto data = resolve(node.constant_hash);
      if (!data.ok()) {
        if (missing.empty()) {
          first_missing = absl::StrCat("node '", node.name, "': constant ", node.constant_hash);
        }
        missing.push_back(node.constant_hash);
        continue;
      }
      if (data->size != node.outputs[0].ByteSize()) {
        return NodeError(node, absl::StrCat("constant ", node.constant_hash, " has ", data->size,
                                            " bytes but its meta ", node.outputs[0].ToString(),
                                            " needs ", node.outputs[0].ByteSize()));
      }
      s.constant_data[i] = data->bytes.get();
      node.share_key = StoreConstantKey(node.constant_hash);
      s.resolved.push_back(*std::move(data));
    }
  }
  if (!missing.empty()) return MissingConstantsError(first_missing, missing);
  s.client_constants = s.resolved.size();
  return absl::OkStatus();
}

// 2. Shape sweep: every op's output metas, validating the whole graph
// before any pass looks at it.
absl::Status InferShapes(CompileState& s) {
  Graph& graph = s.graph;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.kind != Node::Kind::kOp) continue;
    KILN_ASSIGN_OR_RETURN(PreparedOp shapes,
                          PrepareNode(graph, node, s.constant_data, /*shape_only=*/true));
    node.outputs = std::move(shapes.outputs);
  }
  for (const ValueRef& out : graph.outputs) {
    const Node& src = graph.nodes[out.node];
    if (out.output >= static_cast<int>(src.outputs.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph output refers to output ", out.output, " of node '", src.name, "', which has ",
          src.outputs.size(), " outputs"));
    }
  }
  return absl::OkStatus();
}

// 3. Passes. resolved[client_constants:] are the constants they derive.
absl::Status RunPasses(CompileState& s) {
  Graph& graph = s.graph;
  std::vector<const void*>& constant_data = s.constant_data;
  PassContext ctx{graph, constant_data, s.resolved};
  KILN_RETURN_IF_ERROR(EliminateCommonSubexpressions(ctx));
  KILN_RETURN_IF_ERROR(FoldBatchNorm(ctx));
  KILN_RETURN_IF_ERROR(AbsorbWeightTranspose(ctx));
  EliminateDeadNodes(graph);
  KILN_RETURN_IF_ERROR(FoldConstants(ctx));
  KILN_RETURN_IF_ERROR(DropInertAttentionMasks(ctx));
  KILN_RETURN_IF_ERROR(DropEmptyCatInputs(ctx));
  KILN_RETURN_IF_ERROR(FuseConvPostOps(ctx));
  KILN_RETURN_IF_ERROR(FoldConvPadding(ctx));
  KILN_RETURN_IF_ERROR(FuseMatmulPostOps(ctx));
  KILN_RETURN_IF_ERROR(FuseElementwise(ctx));
  EliminateDeadNodes(graph);
  KILN_RETURN_IF_ERROR(ComposeViews(ctx));
  KILN_RETURN_IF_ERROR(PropagateChannelsLast(ctx));
  KILN_RETURN_IF_ERROR(FuseBatchNormActivation(ctx));
  KILN_RETURN_IF_ERROR(FuseConvDepthwise(ctx));
  // The layout pass changed shapes: infer every op's outputs again.
  for (Node& node : graph.nodes) {
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    KILN_ASSIGN_OR_RETURN(PreparedOp shapes,
                          PrepareNode(graph, node, constant_data, /*shape_only=*/true));
    node.outputs = std::move(shapes.outputs);
  }
  KILN_RETURN_IF_ERROR(FuseChannelShuffle(ctx));
  KILN_RETURN_IF_ERROR(FuseSqueezeExcite(ctx));

  ShareDerivedConstants(ctx);
  return absl::OkStatus();
}

// 4 and 5: kernels, the schedule and the memory plan of the graph the
// passes left (or an artifact described).
absl::StatusOr<std::unique_ptr<CompiledGraph>> Lower(CompileState& s, const CompileLimits& limits,
                                                    const CompileHints& hints) {
  std::unique_ptr<CompiledGraph>& cg = s.cg;
  Graph& graph = s.graph;
  std::vector<const void*>& constant_data = s.constant_data;
  std::vector<ConstantData>& resolved = s.resolved;
  CompileReads& reads = s.reads;
  const size_t client_constants = s.client_constants;

  // 4. Kernels, and where every value lives.
  const int n = static_cast<int>(graph.nodes.size());
  cg->slots.resize(n);
  std::vector<BufferRequest> requests;
  // Per value: the arena request it lives in (aliases share their source's).
  std::vector<std::vector<int>> request_of(n);
  // Per node: the step that computes its bytes (an alias's: its source's).
  std::vector<int> step_of(n, -1);
  std::vector<StepUse> step_uses;
  // Inputs and constants first: passes append constants after the ops
  // that use them.
  for (int i = 0; i < n; ++i) {
    Node& node = graph.nodes[i];
    request_of[i].assign(node.outputs.size(), -1);
    if (node.kind == Node::Kind::kInput) {
      cg->slots[i] = {ValueSlot{ValueSlot::Kind::kInput, node.input_index, 0}};
    } else if (node.kind == Node::Kind::kConstant) {
      cg->slots[i] = {ValueSlot{ValueSlot::Kind::kConstant, static_cast<int>(cg->constants.size()), 0}};
      cg->constants.push_back(ConstantData{
          std::shared_ptr<const uint8_t>(std::shared_ptr<void>(), static_cast<const uint8_t*>(constant_data[i])),
          node.outputs[0].ByteSize()});
    }
  }
  // Constant bytes some run reads (not only a kernel's prepare), and those
  // kernels read at prepare time.
  absl::flat_hash_set<const void*> read_at_run, read_at_prepare;
  auto constant_of = [&](ValueRef ref) -> const void* {
    const ValueSlot& slot = cg->slots[ref.node][ref.output];
    return slot.kind == ValueSlot::Kind::kConstant ? cg->constants[slot.index].bytes.get()
                                                   : nullptr;
  };
  // Constants let go of as soon as their last kernel is prepared, when no
  // run reads them: a large model's weights then do not sit in memory
  // twice (original and packed) for the whole compile. Per constant's
  // bytes: the kernels still to prepare that take it, its entries in
  // `resolved` and, for a client's, its hash. Constants read through an
  // alias or as a graph output, and those a check has yet to read in,
  // stay to the end.
  struct Pending {
    int kernels = 0;
    bool pinned = false;
    std::vector<size_t> entries;
    std::string hash;
  };
  absl::flat_hash_map<const void*, Pending> pending;
  for (size_t k = 0; k < resolved.size(); ++k) {
    Pending& p = pending[resolved[k].bytes.get()];
    p.entries.push_back(k);
    p.pinned |= k >= client_constants && hints.keep_derived_constants;
  }
  for (int i = 0; i < n; ++i) {
    const Node& node = graph.nodes[i];
    if (node.kind == Node::Kind::kConstant) {
      if (auto it = pending.find(constant_data[i]); it != pending.end() &&
                                                    !node.constant_hash.empty()) {
        it->second.hash = node.constant_hash;
      }
    }
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    const bool alias = HasTrait(node, kAlias);
    for (const ValueRef& ref : TensorInputsOf(node)) {
      const Node& src = graph.nodes[ref.node];
      if (src.kind != Node::Kind::kConstant) continue;
      auto it = pending.find(constant_data[ref.node]);
      if (it == pending.end()) continue;
      ++it->second.kernels;
      it->second.pinned |= alias;
    }
  }
  for (const ValueRef& out : graph.outputs) {
    if (graph.nodes[out.node].kind != Node::Kind::kConstant) continue;
    if (auto it = pending.find(constant_data[out.node]); it != pending.end()) {
      it->second.pinned = true;
    }
  }
  auto let_go = [&](const void* data) {
    auto it = pending.find(data);
    if (it == pending.end()) return;
    Pending& p = it->second;
    if (p.pinned || p.kernels > 0 || read_at_run.contains(data) || NotReadIn(data)) return;
    bool client = false;
    for (size_t k : p.entries) {
      client |= k < client_constants;
      resolved[k].bytes.reset();
    }
    if (client && !p.hash.empty() && hints.release_constant) hints.release_constant(p.hash);
    pending.erase(it);
  };
  {
    std::vector<const void*> unused;
    for (const auto& [data, p] : pending) {
      if (p.kernels == 0) unused.push_back(data);
    }
    for (const void* data : unused) let_go(data);
  }
  for (int i = 0; i < n; ++i) {
    Node& node = graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp) continue;
    const int step = static_cast<int>(cg->steps.size());
    std::vector<ValueRef> inputs = TensorInputsOf(node);
    if (HasTrait(node, kAlias) && node.outputs.size() == 1 && inputs.size() == 1 &&
        graph.MetaOf(inputs[0]).ByteSize() == node.outputs[0].ByteSize()) {
      // An alias (ops/op_traits.h), validated by the shape sweep: no
      // kernel, the same bytes as its source.
      cg->slots[i] = {cg->slots[inputs[0].node][inputs[0].output]};
      request_of[i][0] = request_of[inputs[0].node][inputs[0].output];
      step_of[i] = step_of[inputs[0].node];
      continue;
    }
    StepUse use;
    for (const ValueRef& ref : inputs) {
      if (int r = request_of[ref.node][ref.output]; r >= 0) use.reads.push_back(r);
      if (step_of[ref.node] >= 0) use.after.push_back(step_of[ref.node]);
    }
    std::vector<TensorMeta> expected = node.outputs;
    const size_t found_before = reads.packed_without_reading.size();
    KILN_ASSIGN_OR_RETURN(PreparedOp prepared,
                          PrepareNode(graph, node, constant_data, /*shape_only=*/false));
    auto found_packed_now = [&] {
      return absl::flat_hash_set<const void*>(
          reads.packed_without_reading.begin() + static_cast<std::ptrdiff_t>(found_before),
          reads.packed_without_reading.end());
    };
    // A kernel that read a constant at prepare time without asking
    // CheckBeforeRead first read bytes that a deferred load had not read in
    // yet (constant_persistence.h): those are read in and checked now, and
    // the kernel is prepared again, from the real bytes.
    bool prepare_again = false;
    {
      const absl::flat_hash_set<const void*> found = found_packed_now();
      for (const void* c : prepared.consumed_constants) {
        if (found.contains(c) || !NotReadIn(c)) continue;
        if (!CheckBeforeRead(c)) return absl::DataLossError(kBadSavedConstant);
        prepare_again = true;
      }
    }
    if (prepare_again) {
      reads.packed_without_reading.resize(found_before);
      KILN_ASSIGN_OR_RETURN(prepared, PrepareNode(graph, node, constant_data, /*shape_only=*/false));
    }
    // What the kernel took at prepare time, bar weights whose packing it
    // found (their bytes were not read): checked below.
    const absl::flat_hash_set<const void*> found_packed = found_packed_now();
    for (const void* c : prepared.consumed_constants) {
      if (!found_packed.contains(c)) read_at_prepare.insert(c);
    }
    if (prepared.outputs != expected) {
      return absl::InternalError(absl::StrCat("node '", node.name,
                                              "': outputs changed between shape sweep and prepare"));
    }
    const absl::flat_hash_set<const void*> consumed(prepared.consumed_constants.begin(),
                                                    prepared.consumed_constants.end());
    for (const ValueRef& ref : inputs) {
      const void* data = constant_of(ref);
      if (data != nullptr && !consumed.contains(data)) read_at_run.insert(data);
    }
    for (const ValueRef& ref : inputs) {
      if (graph.nodes[ref.node].kind != Node::Kind::kConstant) continue;
      auto it = pending.find(constant_data[ref.node]);
      if (it == pending.end()) continue;
      --it->second.kernels;
      let_go(it->first);
    }
    cg->slots[i].resize(node.outputs.size());
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      request_of[i][o] = static_cast<int>(requests.size());
      use.writes.push_back(request_of[i][o]);
      requests.push_back({node.outputs[o].ByteSize(), step, step});
    }
    step_of[i] = step;
    step_uses.push_back(std::move(use));
    cg->steps.push_back({i, std::move(prepared.kernel), std::move(inputs)});
  }
  std::vector<int> output_requests;
  for (const ValueRef& out : graph.outputs) {
    if (const void* data = constant_of(out)) read_at_run.insert(data);
    if (int r = request_of[out.node][out.output]; r >= 0) output_requests.push_back(r);
    cg->output_metas.push_back(graph.MetaOf(out));
  }
  // Outputs a step computes are computed in the caller's output memory
  // instead of the arena (no copy after the run; for a prefill's logits,
  // megabytes): each request that holds exactly one graph output (aliases
  // of it included, which share its bytes). Requests holding two outputs
  // (a value returned twice) stay in the arena and are copied.
  std::vector<int> output_of_request(requests.size(), -1);
  {
    std::vector<int> outputs_in(requests.size(), 0);
    for (int r : output_requests) outputs_in[r]++;
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      const ValueRef& out = graph.outputs[i];
      const int r = request_of[out.node][out.output];
      if (r >= 0 && outputs_in[r] == 1) output_of_request[r] = static_cast<int>(i);
    }
  }
  KILN_RETURN_IF_ERROR(CheckOutputsOverInputs(graph, "graph"));  // with every meta known
  KeepOutputsOverInputsSafe(graph, request_of, &output_of_request);
  // Constants handed out before their checks (cache files, see
  // compile/constant_persistence.h): those read here or by runs must pass
  // now; those nothing read (originals and folds whose packed forms were
  // found) need not be read at all.
  if (reads.failed_check) return absl::DataLossError(kBadSavedConstant);
  for (const auto* set : {&read_at_run, &read_at_prepare}) {
    for (const void* data : *set) {
      if (!CheckBeforeRead(data)) return absl::DataLossError(kBadSavedConstant);
    }
  }
  s.Lap(&cg->phases.kernels_ms);
  // Execution order and waves, and so every value's lifetime.
  ScheduleSteps(graph.options.branches, step_uses, output_requests, cg.get(), &requests);

  // 5. Memory plan.
  for (size_t r = 0; r < requests.size(); ++r) {
    if (output_of_request[r] >= 0) requests[r].bytes = 0;  // in the caller's memory
  }
  const std::vector<int> owner =
      PlanInPlace(graph, *cg, request_of, output_of_request, &requests);
  const JoinPlan joins = PlanJoinedCats(graph, request_of, output_requests, owner, cg.get(),
                                        &requests);
  MemoryPlan plan = PlanMemory(requests);
  // A request lives in its in-place owner's bytes, and that owner, when
  // joined, at its offset in a cat's output.
  std::vector<int64_t> offsets(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    const int o = owner[r];
    offsets[r] = plan.offsets[joins.owner[o]] + joins.offset_in_owner[o];
  }
  plan.offsets = std::move(offsets);
  for (int i = 0; i < n; ++i) {
    for (size_t o = 0; o < request_of[i].size(); ++o) {
      const int r = request_of[i][o];
      if (r < 0) continue;
      cg->slots[i][o] = output_of_request[r] >= 0
                            ? ValueSlot{ValueSlot::Kind::kOutput, output_of_request[r], 0}
                            : ValueSlot{ValueSlot::Kind::kArena, 0, plan.offsets[r]};
    }
  }
  cg->arena_bytes = plan.arena_bytes;
  if (cg->TotalArenaBytes() > limits.max_arena_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph needs ", cg->TotalArenaBytes(), " bytes of intermediate memory; the limit is ",
        limits.max_arena_bytes));
  }
  // Keep alive the constants runs read, and only those: what kernels
  // packed or copied at prepare time (most weights) is not needed again,
  // and a client's original then lives on only in the constant store,
  // which drops it when no graph holds it (cache/constant_store.h).
  for (size_t k = 0; k < resolved.size(); ++k) {
    ConstantData& c = resolved[k];
    const bool derived = k >= client_constants;
    if (read_at_run.contains(c.bytes.get()) || (derived && hints.keep_derived_constants)) {
      cg->owned_constants.push_back(std::move(c));
    }
  }
  for (ConstantData& c : cg->constants) {
    if (!read_at_run.contains(c.bytes.get())) c.bytes.reset();  // would dangle: never read
  }
  s.Lap(&cg->phases.plan_ms);
  cg->graph = std::move(graph);
  return std::move(cg);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompiledGraph>> Compile(
    Graph graph, const ConstantResolver& resolve, const CompileLimits& limits,
    const CompileHints& hints) {
  CompileState s;
  s.graph = std::move(graph);
  KILN_RETURN_IF_ERROR(ResolveClientConstants(s, resolve));
  s.Lap(&s.cg->phases.constants_ms);
  KILN_RETURN_IF_ERROR(InferShapes(s));
  s.Lap(&s.cg->phases.shapes_ms);
  KILN_RETURN_IF_ERROR(RunPasses(s));
  if (hints.on_optimized) hints.on_optimized(s.graph, s.constant_data);
  s.Lap(&s.cg->phases.passes_ms);
  return Lower(s, limits, hints);
}

absl::StatusOr<std::unique_ptr<CompiledGraph>> CompileOptimized(
    Graph optimized, std::vector<std::pair<int, ConstantData>> inline_constants,
    const ConstantResolver& resolve, const CompileLimits& limits, const CompileHints& hints) {
  CompileState s;
  s.graph = std::move(optimized);
  KILN_RETURN_IF_ERROR(ResolveClientConstants(s, resolve));
  // Derived constants: kept in the artifact, live in another compiled
  // graph, or saved in the cache directory (read when first needed; a
  // weight whose packed form is saved too is never read).
  for (auto& [index, data] : inline_constants) {
    if (index < 0 || index >= static_cast<int>(s.graph.nodes.size()) ||
        s.graph.nodes[index].kind != Node::Kind::kConstant || s.constant_data[index] != nullptr) {
      return absl::InvalidArgumentError("inline constant of no constant node");
    }
    s.constant_data[index] = data.bytes.get();
    s.resolved.push_back(std::move(data));
  }
  ConstantPersistence* persistence = CurrentPersistence();
  for (size_t i = 0; i < s.graph.nodes.size(); ++i) {
    const Node& node = s.graph.nodes[i];
    if (node.kind != Node::Kind::kConstant || s.constant_data[i] != nullptr) continue;
    const int64_t size = node.outputs[0].ByteSize();
    std::optional<ConstantData> data;
    if (std::optional<SharedConstant> live = FindShared(node.share_key);
        live && live->data.size == size) {
      data = std::move(live->data);
    } else if (persistence != nullptr) {
      if (std::optional<ConstantData> saved =
              persistence->Load(node.share_key, size, /*defer_check=*/true)) {
        data = PublishShared(node.share_key, SharedConstant{*std::move(saved), node.outputs}).data;
      }
    }
    if (!data || data->size != size) {
      return absl::NotFoundError(absl::StrCat("node '", node.name, "': derived constant ",
                                              node.share_key, " is not saved"));
    }
    s.constant_data[i] = data->bytes.get();
    s.resolved.push_back(*std::move(data));
  }
  s.Lap(&s.cg->phases.constants_ms);
  KILN_RETURN_IF_ERROR(InferShapes(s));
  s.Lap(&s.cg->phases.shapes_ms);
  return Lower(s, limits, hints);
}

}  // namespace kiln::runtime
