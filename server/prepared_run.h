// The execution path that the Execute RPC and call channels share: resolve
// a handle and its tensors' places in the session's shared memory, check
// them, run the graph, and check afterwards that no region it touched broke
// meanwhile. One code path, so a call is checked the same whichever way it
// came in.
//
// Free functions over a Session: nothing here keeps state, and each part
// can be driven with a real session and real shared memory without the
// gRPC service around it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kiln/v1/kiln.pb.h"
#include "runtime/compile/compiled_graph.h"
#include "server/call_channel.h"
#include "server/session.h"
#include "server/shm_region.h"

namespace kiln::server {

// One validated execution: the graph, the tensors' addresses, and owning
// references to everything those point into, so the run outlives a
// concurrent Release or UnregisterRegion. Movable; dropping it lets go of
// the regions.
struct PreparedRun {
  std::chrono::steady_clock::time_point start;
  std::shared_ptr<const runtime::CompiledGraph> graph;
  std::vector<std::shared_ptr<ShmRegion>> regions;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  // False when the client computes right after this run (a channel
  // request's flag): see runtime::Execute.
  bool keep_warm = true;
  // Bytes of the inputs, and of those in output blocks (an earlier call's
  // outputs, passed back without a copy): StatsResponse.input_bytes*.
  uint64_t input_bytes = 0;
  uint64_t input_bytes_in_place = 0;
};

// Resolves bytes [offset, offset + byte_size) of one of the session's
// regions as a tensor of `expected` (dense, contiguous): the span must lie
// inside the region, hold the tensor and be aligned for its element type.
// With `keep`, the region is added to it, so the mapping outlives a
// concurrent UnregisterRegion while it is in use. INVALID_ARGUMENT naming
// `what` otherwise.
[[nodiscard]] absl::StatusOr<uint8_t*> ResolveSlot(
    const Session& session, const TensorSlot& slot, const runtime::TensorMeta& expected,
    const std::string& what, std::vector<std::shared_ptr<ShmRegion>>* keep = nullptr);

// A wire descriptor: its meta must be `expected` exactly, then as ResolveSlot.
[[nodiscard]] absl::StatusOr<uint8_t*> ResolveDescriptor(
    const Session& session, const kiln::v1::TensorDescriptor& desc,
    const runtime::TensorMeta& expected, const std::string& what,
    std::vector<std::shared_ptr<ShmRegion>>* keep = nullptr);

// Everything a run of `handle` needs: as many slots as the graph has inputs
// and outputs, each resolved (ResolveSlot), outputs disjoint from every
// other tensor (overlap_check.h). Starts the run's clock.
[[nodiscard]] absl::StatusOr<PreparedRun> PrepareRun(const Session& session, uint64_t handle,
                                                     absl::Span<const TensorSlot> inputs,
                                                     absl::Span<const TensorSlot> outputs);

// An Execute request's run: its wire descriptors' metas must match the
// graph's, then as PrepareRun.
[[nodiscard]] absl::StatusOr<PreparedRun> PrepareExecuteRequest(
    const Session& session, const kiln::v1::ExecuteRequest& req);

// Runs a prepared execution; its status, or the status of a region it used
// that broke meanwhile (client_memory_guard.h). Thread-safe for distinct
// runs of the same graph.
[[nodiscard]] absl::Status RunPrepared(const PreparedRun& run);

}  // namespace kiln::server
