#include "server/prepared_run.h"

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/util/status_macros.h"
#include "server/overlap_check.h"
#include "server/request_guard.h"

namespace kiln::server {

absl::StatusOr<uint8_t*> ResolveSlot(const Session& session, const TensorSlot& slot,
                                     const runtime::TensorMeta& expected, const std::string& what,
                                     std::vector<std::shared_ptr<ShmRegion>>* keep) {
  auto fail = [&](const std::string& msg) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", msg));
  };
  const uint64_t needed = static_cast<uint64_t>(expected.ByteSize());
  if (slot.byte_size < needed) {
    return fail(absl::StrCat("descriptor holds ", slot.byte_size, " bytes, the tensor ",
                             expected.ToString(), " needs ", needed));
  }
  if (slot.offset % runtime::ElementSize(expected.dtype) != 0) {
    return fail(absl::StrCat("offset ", slot.offset, " is not aligned to the element size"));
  }
  auto region = session.Region(slot.region_id);
  if (!region.ok()) return fail(std::string(region.status().message()));
  auto ptr = (*region)->Resolve(slot.offset, slot.byte_size);
  if (!ptr.ok()) return fail(std::string(ptr.status().message()));
  if (keep != nullptr) keep->push_back(*std::move(region));
  return *ptr;
}

absl::StatusOr<uint8_t*> ResolveDescriptor(const Session& session,
                                           const kiln::v1::TensorDescriptor& desc,
                                           const runtime::TensorMeta& expected,
                                           const std::string& what,
                                           std::vector<std::shared_ptr<ShmRegion>>* keep) {
  auto meta = runtime::MetaFromProto(desc.meta());
  if (!meta.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", meta.status().message()));
  }
  if (*meta != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": tensor is ", meta->ToString(), ", the graph expects ", expected.ToString()));
  }
  return ResolveSlot(session, TensorSlot{desc.region_id(), desc.offset(), desc.byte_size()},
                     expected, what, keep);
}

absl::StatusOr<PreparedRun> PrepareRun(const Session& session, uint64_t handle,
                                       absl::Span<const TensorSlot> inputs,
                                       absl::Span<const TensorSlot> outputs) {
  PreparedRun run;
  run.start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(run.graph, session.Handle(handle));
  const runtime::CompiledGraph& graph = *run.graph;
  if (inputs.size() != graph.input_metas.size() || outputs.size() != graph.output_metas.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "handle ", handle, " takes ", graph.input_metas.size(), " inputs and ",
        graph.output_metas.size(), " outputs; the request has ", inputs.size(), " and ",
        outputs.size()));
  }
  absl::InlinedVector<TensorSpan, 8> spans;
  auto span = [&](const TensorSlot& slot, const runtime::TensorMeta& meta, bool output,
                  size_t index) {
    const ShmRegion& region = *run.regions.back();
    spans.push_back(TensorSpan{region.device(), region.inode(), slot.offset,
                               slot.offset + static_cast<uint64_t>(meta.ByteSize()), output,
                               static_cast<int>(index)});
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(uint8_t * p, ResolveSlot(session, inputs[i], graph.input_metas[i],
                                                   absl::StrCat("input ", i), &run.regions));
    run.inputs.push_back(p);
    span(inputs[i], graph.input_metas[i], false, i);
    const auto bytes = static_cast<uint64_t>(graph.input_metas[i].ByteSize());
    run.input_bytes += bytes;
    if (run.regions.back()->output_block()) run.input_bytes_in_place += bytes;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(uint8_t * p, ResolveSlot(session, outputs[i], graph.output_metas[i],
                                                   absl::StrCat("output ", i), &run.regions));
    run.outputs.push_back(p);
    span(outputs[i], graph.output_metas[i], true, i);
  }
  absl::InlinedVector<OutputOverInput, 4> may_coincide;
  for (const runtime::OutputOverInput& pair : graph.graph.outputs_over_inputs) {
    may_coincide.push_back({pair.output, pair.input});
  }
  KILN_RETURN_IF_ERROR(CheckOutputsDisjoint(absl::MakeSpan(spans), may_coincide));
  return run;
}

absl::StatusOr<PreparedRun> PrepareExecuteRequest(const Session& session,
                                                  const kiln::v1::ExecuteRequest& req) {
  KILN_ASSIGN_OR_RETURN(auto graph, session.Handle(req.handle()));
  // The wire descriptors carry metas: check them, then resolve as slots.
  std::vector<TensorSlot> inputs, outputs;
  auto check = [&](const auto& descs, const std::vector<runtime::TensorMeta>& metas,
                   const char* what, std::vector<TensorSlot>* slots) -> absl::Status {
    for (int i = 0; i < descs.size(); ++i) {
      if (static_cast<size_t>(i) < metas.size()) {
        auto p = ResolveDescriptor(session, descs.Get(i), metas[i], absl::StrCat(what, " ", i));
        if (!p.ok()) return p.status();
      }
      slots->push_back(
          TensorSlot{descs.Get(i).region_id(), descs.Get(i).offset(), descs.Get(i).byte_size()});
    }
    return absl::OkStatus();
  };
  if (req.inputs_size() == static_cast<int>(graph->input_metas.size()) &&
      req.outputs_size() == static_cast<int>(graph->output_metas.size())) {
    KILN_RETURN_IF_ERROR(check(req.inputs(), graph->input_metas, "input", &inputs));
    KILN_RETURN_IF_ERROR(check(req.outputs(), graph->output_metas, "output", &outputs));
  } else {
    // PrepareRun names the counts that do not match.
    inputs.resize(req.inputs_size());
    outputs.resize(req.outputs_size());
  }
  return PrepareRun(session, req.handle(), inputs, outputs);
}

absl::Status RunPrepared(const PreparedRun& run) {
  absl::Status s = Guarded("running a graph",
                           [&] {
    return runtime::Execute(*run.graph, run.inputs, run.outputs, run.keep_warm);
  });
  // A region that shrank during the run read as zeros and swallowed what
  // was written: whatever the run says, its results are void.
  for (const auto& region : run.regions) KILN_RETURN_IF_ERROR(region->Check());
  return s;
}

}  // namespace kiln::server
