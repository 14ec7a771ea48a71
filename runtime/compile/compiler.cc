#include "runtime/compile/compiler.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "runtime/ops/registry.h"
#include "runtime/plan/memory_plan.h"
#include "runtime/util/status_macros.h"

namespace kiln::runtime {

RunArena::RunArena(int64_t bytes) {
  size_t size = static_cast<size_t>((std::max<int64_t>(bytes, 64) + 63) / 64 * 64);
  data = static_cast<uint8_t*>(std::aligned_alloc(64, size));
}

RunArena::~RunArena() { std::free(data); }

namespace {

absl::Status NodeError(const Node& node, absl::string_view msg) {
  return absl::InvalidArgumentError(
      absl::StrCat("node '", node.name, "' (", node.target, "): ", msg));
}

absl::Status CheckInputsKnown(const Graph& g, const Node& node) {
  for (const ValueRef& ref : TensorInputsOf(node)) {
    const Node& src = g.nodes[ref.node];
    if (ref.output >= static_cast<int>(src.outputs.size())) {
      return NodeError(node, absl::StrCat("refers to output ", ref.output,
                                          " of node '", src.name, "', which has ",
                                          src.outputs.size(), " outputs"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CompiledGraph>> Compile(
    Graph graph, const ConstantResolver& resolve, const CompileLimits& limits) {
  auto cg = std::make_unique<CompiledGraph>();
  const int n = static_cast<int>(graph.nodes.size());
  cg->slots.resize(n);
  std::vector<const void*> constant_data(n, nullptr);

  // Resolve constants and inputs first: prepare functions may read constant
  // bytes (weights to prepack).
  for (int i = 0; i < n; ++i) {
    Node& node = graph.nodes[i];
    if (node.kind == Node::Kind::kInput) {
      cg->slots[i] = {ValueSlot{ValueSlot::Kind::kInput, node.input_index, 0}};
      cg->input_metas.push_back(node.outputs[0]);
    } else if (node.kind == Node::Kind::kConstant) {
      auto data = resolve(node.constant_hash);
      if (!data.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "node '", node.name, "': constant ", node.constant_hash,
            " is not in the daemon's store (upload it first)"));
      }
      if (data->size != node.outputs[0].ByteSize()) {
        return NodeError(node, absl::StrCat("constant ", node.constant_hash, " has ",
                                            data->size, " bytes but its meta ",
                                            node.outputs[0].ToString(), " needs ",
                                            node.outputs[0].ByteSize()));
      }
      constant_data[i] = data->bytes.get();
      cg->slots[i] = {ValueSlot{ValueSlot::Kind::kConstant,
                                static_cast<int>(cg->constants.size()), 0}};
      cg->constants.push_back(*std::move(data));
    }
  }

  // Prepare ops in order: each sees its inputs' metas already inferred.
  std::vector<BufferRequest> requests;
  std::vector<std::pair<int, int>> request_value;  // (node, output)
  std::vector<int> step_of_node(n, -1);
  for (int i = 0; i < n; ++i) {
    Node& node = graph.nodes[i];
    if (node.kind != Node::Kind::kOp) continue;
    KILN_RETURN_IF_ERROR(CheckInputsKnown(graph, node));
    const OpDef& def = AllOps()[node.op_index];
    std::vector<ValueRef> inputs = TensorInputsOf(node);
    for (const ValueRef& ref : inputs) {
      DType dt = graph.MetaOf(ref).dtype;
      if ((def.dtypes & DTypeBit(dt)) == 0) {
        return absl::UnimplementedError(absl::StrCat(
            "node '", node.name, "' (", node.target, "): dtype ", DTypeName(dt),
            " is not supported by this op"));
      }
    }
    NodeArgs args(graph, node, constant_data);
    KILN_ASSIGN_OR_RETURN(PreparedOp prepared, def.prepare(args));
    for (const TensorMeta& meta : prepared.outputs) {
      absl::Status s = ValidateMeta(meta);
      if (!s.ok()) return NodeError(node, s.message());
    }
    node.outputs = std::move(prepared.outputs);
    const int step = static_cast<int>(cg->steps.size());
    step_of_node[i] = step;
    cg->scratch_bytes = std::max<int64_t>(
        cg->scratch_bytes, static_cast<int64_t>(prepared.kernel->ScratchBytes()));
    cg->slots[i].resize(node.outputs.size());
    for (int o = 0; o < static_cast<int>(node.outputs.size()); ++o) {
      requests.push_back({node.outputs[o].ByteSize(), step, step});
      request_value.emplace_back(i, o);
    }
    cg->steps.push_back({i, std::move(prepared.kernel), std::move(inputs)});
  }

  // Lifetimes: a value lives until its last consumer; graph outputs until
  // the final copy-out after the last step.
  std::vector<std::vector<int>> request_index(n);
  for (int r = 0; r < static_cast<int>(request_value.size()); ++r) {
    auto [node, output] = request_value[r];
    request_index[node].resize(graph.nodes[node].outputs.size(), -1);
    request_index[node][output] = r;
  }
  for (const CompiledStep& step : cg->steps) {
    const int s = step_of_node[step.node];
    for (const ValueRef& ref : step.inputs) {
      if (graph.nodes[ref.node].kind == Node::Kind::kOp) {
        int r = request_index[ref.node][ref.output];
        requests[r].last = std::max(requests[r].last, s);
      }
    }
  }
  const int end = static_cast<int>(cg->steps.size());
  for (const ValueRef& out : graph.outputs) {
    const Node& src = graph.nodes[out.node];
    if (out.output >= static_cast<int>(src.outputs.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "graph output refers to output ", out.output, " of node '", src.name,
          "', which has ", src.outputs.size(), " outputs"));
    }
    if (src.kind == Node::Kind::kOp) {
      requests[request_index[out.node][out.output]].last = end;
    }
    cg->output_metas.push_back(graph.MetaOf(out));
  }

  MemoryPlan plan = PlanMemory(requests);
  for (int r = 0; r < static_cast<int>(requests.size()); ++r) {
    auto [node, output] = request_value[r];
    cg->slots[node][output] = {ValueSlot::Kind::kArena, 0, plan.offsets[r]};
  }
  cg->arena_bytes = plan.arena_bytes;
  if (cg->TotalArenaBytes() > limits.max_arena_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "graph needs ", cg->TotalArenaBytes(), " bytes of intermediate memory; the limit is ",
        limits.max_arena_bytes));
  }
  cg->graph = std::move(graph);
  return cg;
}

}  // namespace kiln::runtime
