#include "runtime/compile/compiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <new>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "runtime/compile/constant_persistence.h"
#include "runtime/compile/shared_constants.h"
#include "runtime/kernels/kernel_util.h"
#include "runtime/ops/registry.h"
#include "runtime/passes/pass_context.h"
#include "runtime/plan/in_place.h"
#include "runtime/plan/joined_in_place.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/plan/waves.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

RunArena::RunArena(int64_t bytes) {
  size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 64) + 63) / 64 * 64);
  data = static_cast<uint8_t*>(std::aligned_alloc(64, size));
  // Kernels write through `data` unchecked: no arena is no run (the
  // daemon turns this into RESOURCE_EXHAUSTED for the one request).
  if (data == nullptr) throw std::bad_alloc();
}

RunArena::~RunArena() { std::free(data); }

namespace {

// Largest constant a compile-time fold may create; folding must not turn a
// small graph into a huge artifact (an expand of a scalar, say).
constexpr int64_t kMaxFoldedBytes = int64_t{64} << 20;

absl::Status NodeError(const Node& node, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node.name, "' (", node.target, "): ", msg));
}

absl::Status CheckInputs(const Graph& g, const Node& node, const OpDef& def) {
  for (const ValueRef& ref : TensorInputsOf(node)) {
    const Node& src = g.nodes[ref.node];
    if (ref.output >= static_cast<int>(src.outputs.size())) {
      return NodeError(node, absl::StrCat("refers to output ", ref.output, " of node '", src.name,
                                          "', which has ", src.outputs.size(), " outputs"));
    }
    DType dt = g.MetaOf(ref).dtype;
    if ((def.dtypes & DTypeBit(dt)) == 0) {
      return absl::UnimplementedError(absl::StrCat("node '", node.name, "' (", node.target,
                                                   "): dtype ", DTypeName(dt),
                                                   " is not supported by this op"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PreparedOp> PrepareNode(const Graph& g, const Node& node,
                                       const std::vector<const void*>& constant_data,
                                       bool shape_only) {
  const OpDef& def = AllOps()[node.op_index];
  KILN_RETURN_IF_ERROR(CheckInputs(g, node, def));
  NodeArgs args(g, node, constant_data, shape_only, g.options);
  KILN_ASSIGN_OR_RETURN(PreparedOp prepared, def.prepare(args));
  for (const TensorMeta& meta : prepared.outputs) {
    absl::Status s = ValidateMeta(meta);
    if (!s.ok()) return NodeError(node, s.message());
  }
  if (!shape_only && prepared.kernel == nullptr) {
    return absl::InternalError(absl::StrCat("node '", node.name, "': prepare built no kernel"));
  }
  return prepared;
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
    // The shape sweep inferred the output (one, as the caller checked).
    if (persistence != nullptr) {
      if (std::optional<ConstantData> saved =
              persistence->Load(key, node.outputs[0].ByteSize(), /*defer_check=*/true)) {
        use(PublishShared(key, SharedConstant{*std::move(saved), node.outputs}));
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
  buffers.push_back(std::make_unique<RunArena>(prepared.outputs[0].ByteSize()));
  out.push_back({buffers.back()->data, &prepared.outputs[0]});
  RunArena scratch(static_cast<int64_t>(prepared.kernel->ScratchBytes()));
  KILN_RETURN_IF_ERROR(prepared.kernel->Run(KernelContext{in, out, scratch.data}));
  SharedConstant folded{ConstantData{std::shared_ptr<const uint8_t>(
                                         buffers[0]->data,
                                         [](const uint8_t* p) { std::free(const_cast<uint8_t*>(p)); }),
                                     prepared.outputs[0].ByteSize()},
                        prepared.outputs};
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

// What the compiler knows about a step before it is scheduled: the arena
// requests it reads and writes, and the steps it reads from.
struct StepUse {
  std::vector<int> reads;   // requests of its inputs (repeats allowed)
  std::vector<int> writes;  // requests of its outputs
  std::vector<int> after;   // steps whose outputs it reads
};

// Puts cg->steps in execution order, grouped into waves (one step each
// without branches), and gives every request its time span in waves: a
// wave is one point in time, so values produced or read in the same wave
// never share bytes. Graph outputs live past the last wave (the copy-out).
// Steps of one wave get disjoint scratch.
void ScheduleSteps(BranchMode branches, const std::vector<StepUse>& uses,
                   const std::vector<int>& output_requests, CompiledGraph* cg,
                   std::vector<BufferRequest>* requests) {
  std::vector<std::vector<int>> after;
  after.reserve(uses.size());
  for (const StepUse& u : uses) after.push_back(u.after);
  WaveLimits limits;
  if (branches == BranchMode::kOff) limits.lookahead = 0;
  const WavePlan plan = PlanWaves(after, limits);

  std::vector<CompiledStep> steps(cg->steps.size());
  for (BufferRequest& r : *requests) r.first = r.last = -1;
  cg->scratch_bytes = 0;
  for (int w = 0; w < plan.num_waves(); ++w) {
    int64_t scratch = 0;
    for (int i = plan.begin[w]; i < plan.begin[w + 1]; ++i) {
      const int s = plan.order[i];
      for (int r : uses[s].reads) (*requests)[r].last = std::max((*requests)[r].last, w);
      for (int r : uses[s].writes) {
        (*requests)[r].first = w;
        (*requests)[r].last = std::max((*requests)[r].last, w);
      }
      steps[i] = std::move(cg->steps[s]);
      steps[i].scratch_offset = scratch;
      scratch += (static_cast<int64_t>(steps[i].kernel->ScratchBytes()) + kPlanAlignment - 1) /
                 kPlanAlignment * kPlanAlignment;
    }
    cg->scratch_bytes = std::max(cg->scratch_bytes, scratch);
    cg->waves.push_back({plan.begin[w], plan.begin[w + 1]});
  }
  for (int r : output_requests) (*requests)[r].last = plan.num_waves();
  cg->steps = std::move(steps);
  cg->threading.step_ns = std::vector<std::atomic<int64_t>>(cg->steps.size());
  for (auto& ns : cg->threading.step_ns) ns = std::numeric_limits<int64_t>::max();
}

// kiln.conv2d's residual argument (ops.def).
constexpr ArgSlot kConvResidual = KILN_ARG("kiln.conv2d", "residual");

// Convolutions with a fused residual add write their output over the
// residual when nothing else reads it any more (plan/in_place.h); the
// kernel then skips copying the residual into its output. Returns each
// request's owner. Call after ScheduleSteps (lifetimes in waves).
std::vector<int> PlanInPlace(const Graph& graph, const CompiledGraph& cg,
                             const std::vector<std::vector<int>>& request_of,
                             const std::vector<int>& output_of_request,
                             std::vector<BufferRequest>* requests) {
  std::vector<std::vector<int>> reads_in_wave(cg.waves.size());
  std::vector<InPlaceCandidate> candidates;
  for (size_t w = 0; w < cg.waves.size(); ++w) {
    for (int i = cg.waves[w].begin; i < cg.waves[w].end; ++i) {
      const CompiledStep& step = cg.steps[i];
      for (const ValueRef& ref : step.inputs) {
        reads_in_wave[w].push_back(request_of[ref.node][ref.output]);
      }
      const Node& node = graph.nodes[step.node];
      if (node.target != "kiln.conv2d" || node.args.size() <= kConvResidual.pos ||
          node.args[kConvResidual.pos].kind != Arg::Kind::kTensor ||
          node.outputs.size() != 1) {
        continue;
      }
      const ValueRef residual = node.args[kConvResidual.pos].tensor;
      InPlaceCandidate c;
      c.wave = static_cast<int>(w);
      c.output = request_of[step.node][0];
      c.input = request_of[residual.node][residual.output];
      if (c.output < 0 || c.input < 0 || output_of_request[c.output] >= 0) continue;
      bool skipped = false;  // the residual's own read, once
      for (const ValueRef& ref : step.inputs) {
        if (!skipped && ref == residual) {
          skipped = true;
          continue;
        }
        c.other_reads.push_back(request_of[ref.node][ref.output]);
      }
      candidates.push_back(std::move(c));
    }
  }
  return ShareInPlace(candidates, reads_in_wave, requests);
}

// Cats whose inputs fill their output end to end (every dimension before
// the cat's is 1) become join candidates (plan/joined_in_place.h); those
// joined lose their step, since their inputs' producers then write the
// output. Call after PlanInPlace; returns the join plan, whose owners
// compose with the in-place ones.
JoinPlan PlanJoinedCats(const Graph& graph, const std::vector<std::vector<int>>& request_of,
                        const std::vector<int>& output_requests,
                        const std::vector<int>& in_place_owner, CompiledGraph* cg,
                        std::vector<BufferRequest>* requests) {
  std::vector<bool> pinned(requests->size(), false);
  for (int r : output_requests) pinned[r] = true;
  std::vector<JoinCandidate> candidates;
  std::vector<int> candidate_step;
  // KILN_JOIN_CATS=0 keeps every cat's copy, for comparisons (read per
  // compile, so tests can compare the two).
  const bool join_cats = KernelSwitchOn("KILN_JOIN_CATS");
  for (size_t s = 0; join_cats && s < cg->steps.size(); ++s) {
    const Node& node = graph.nodes[cg->steps[s].node];
    if (node.target != "aten.cat.default" || node.outputs.size() != 1) continue;
    const TensorMeta& out = node.outputs[0];
    int64_t dim = 0;
    if (node.args.size() > 1 && node.args[1].kind == Arg::Kind::kInt) dim = node.args[1].i;
    for (const NamedArg& a : node.kwargs) {
      if (a.name == "dim" && a.value.kind == Arg::Kind::kInt) dim = a.value.i;
    }
    if (dim < 0) dim += out.rank();
    if (dim < 0 || dim >= out.rank()) continue;
    bool leading_ones = true;
    for (int64_t d = 0; d < dim; ++d) leading_ones = leading_ones && out.shape[d] == 1;
    if (!leading_ones) continue;
    JoinCandidate c;
    c.output = request_of[cg->steps[s].node][0];
    int64_t offset = 0;
    for (const ValueRef& ref : cg->steps[s].inputs) {
      c.pieces.push_back(request_of[ref.node][ref.output]);
      c.offsets.push_back(offset);
      offset += graph.MetaOf(ref).ByteSize();
    }
    if (offset != out.ByteSize()) continue;  // e.g. a skipped 1-D empty input
    candidates.push_back(std::move(c));
    candidate_step.push_back(static_cast<int>(s));
  }
  JoinPlan plan = ShareJoined(candidates, pinned, in_place_owner, requests);
  std::vector<bool> drop(cg->steps.size(), false);
  for (size_t k = 0; k < candidates.size(); ++k) {
    if (!plan.joined[k]) continue;
    drop[candidate_step[k]] = true;
    cg->joined_cats.push_back(cg->steps[candidate_step[k]].node);
  }
  if (cg->joined_cats.empty()) return plan;
  std::vector<CompiledStep> steps;
  std::vector<Wave> waves;
  for (const Wave& w : cg->waves) {
    Wave kept{static_cast<int>(steps.size()), static_cast<int>(steps.size())};
    for (int s = w.begin; s < w.end; ++s) {
      if (!drop[s]) steps.push_back(std::move(cg->steps[s]));
    }
    kept.end = static_cast<int>(steps.size());
    if (kept.size() > 0) waves.push_back(kept);
  }
  cg->steps = std::move(steps);
  cg->waves = std::move(waves);
  cg->threading.step_ns = std::vector<std::atomic<int64_t>>(cg->steps.size());
  for (auto& ns : cg->threading.step_ns) ns = std::numeric_limits<int64_t>::max();
  return plan;
}

constexpr char kBadSavedConstant[] =
    "a constant saved in the cache directory failed its checksum (removed; compile again)";

bool AllInputsConstant(const PassContext& ctx, const Node& node) {
  std::vector<ValueRef> refs = TensorInputsOf(node);
  if (refs.empty()) return false;
  for (const ValueRef& ref : refs) {
    if (ctx.constant_data[ref.node] == nullptr || ref.output != 0) return false;
  }
  return true;
}

}  // namespace

absl::Status MissingConstantsError(const std::string& first, int count) {
  return absl::FailedPreconditionError(absl::StrCat(
      first, count > 1 ? absl::StrCat(" and ", count - 1, " more constants") : "",
      " not in the daemon's store (upload them first)"));
}

absl::StatusOr<std::unique_ptr<CompiledGraph>> Compile(
    Graph graph, const ConstantResolver& resolve, const CompileLimits& limits,
    const CompileHints& hints) {
  auto cg = std::make_unique<CompiledGraph>();
  CompileReads reads;
  CompileReadsScope reads_scope(&reads);
  auto lap = [last = std::chrono::steady_clock::now()](double* into) mutable {
    const auto now = std::chrono::steady_clock::now();
    *into = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
  };
  std::vector<const void*> constant_data(graph.nodes.size(), nullptr);
  std::vector<ConstantData> resolved;

  // 1. Constants: prepare functions and passes read their bytes. Every
  // one is looked up before failing, so the client learns of all the
  // missing ones at once (a store backed by files drops bad ones on lookup).
  std::string first_missing;
  int missing = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.kind == Node::Kind::kInput) {
      cg->input_metas.push_back(node.outputs[0]);
    } else if (node.kind == Node::Kind::kConstant) {
      auto data = resolve(node.constant_hash);
      if (!data.ok()) {
        if (missing++ == 0) {
          first_missing = absl::StrCat("node '", node.name, "': constant ", node.constant_hash);
        }
        continue;
      }
      if (data->size != node.outputs[0].ByteSize()) {
        return NodeError(node, absl::StrCat("constant ", node.constant_hash, " has ", data->size,
                                            " bytes but its meta ", node.outputs[0].ToString(),
                                            " needs ", node.outputs[0].ByteSize()));
      }
      constant_data[i] = data->bytes.get();
      node.share_key = StoreConstantKey(node.constant_hash);
      resolved.push_back(*std::move(data));
    }
  }

  if (missing > 0) return MissingConstantsError(first_missing, missing);
  lap(&cg->phases.constants_ms);

  // 2. Shape sweep: every op's output metas, validating the whole graph
  // before any pass looks at it; constant-only ops are folded on the way.
  // resolved[client_constants:] are the constants passes derive.
  const size_t client_constants = resolved.size();
  PassContext ctx{graph, constant_data, resolved};
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.kind != Node::Kind::kOp) continue;
    KILN_ASSIGN_OR_RETURN(PreparedOp shapes,
                          PrepareNode(graph, node, constant_data, /*shape_only=*/true));
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

  lap(&cg->phases.shapes_ms);

  // 3. Passes.
  KILN_RETURN_IF_ERROR(FoldBatchNorm(ctx));
  KILN_RETURN_IF_ERROR(AbsorbWeightTranspose(ctx));
  EliminateDeadNodes(graph);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& node = graph.nodes[i];
    if (node.dead || node.kind != Node::Kind::kOp || node.outputs.size() != 1 ||
        node.outputs[0].ByteSize() > kMaxFoldedBytes || !AllInputsConstant(ctx, node)) {
      continue;
    }
    KILN_RETURN_IF_ERROR(FoldNode(ctx, static_cast<int>(i)));
  }
  KILN_RETURN_IF_ERROR(DropEmptyCatInputs(ctx));
  KILN_RETURN_IF_ERROR(FuseConvPostOps(ctx));
  KILN_RETURN_IF_ERROR(FuseMatmulPostOps(ctx));
  KILN_RETURN_IF_ERROR(FuseElementwise(ctx));
  EliminateDeadNodes(graph);
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
  lap(&cg->phases.passes_ms);

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
  lap(&cg->phases.kernels_ms);
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
  lap(&cg->phases.plan_ms);
  cg->graph = std::move(graph);
  return cg;
}

}  // namespace kiln::runtime
