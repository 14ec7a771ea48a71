// KilnService: what the daemon tells about itself. GetCapabilities (the op
// schema and CPU features), GetStats, and the metrics --metrics-port serves.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <optional>

#include "cache/compiler_version.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/registry.h"
#include "runtime/util/cpu_features.h"
#include "server/kiln_service.h"
#include "server/request_guard.h"
#include "server/status_map.h"

namespace kiln::server {
namespace {

// VmRSS from /proc/self/statm (pages); 0 where that cannot be read.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

grpc::ServerUnaryReactor* KilnService::GetCapabilities(grpc::CallbackServerContext* ctx,
                                                       const kiln::v1::CapabilitiesRequest*,
                                                       kiln::v1::CapabilitiesResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("listing capabilities", [&] { return DoGetCapabilities(resp); }));
}

absl::Status KilnService::DoGetCapabilities(kiln::v1::CapabilitiesResponse* resp) {
  resp->set_runtime_version(cache::CompilerVersion());
  resp->add_devices("CPU");
  for (const runtime::OpDef& op : runtime::AllOps()) {
    if (op.internal) continue;
    auto* support = resp->add_ops();
    support->set_target(op.target);
    for (int d = 1; d <= static_cast<int>(runtime::kLastDType); ++d) {
      if (op.dtypes & runtime::DTypeBit(static_cast<runtime::DType>(d))) {
        support->add_dtypes(static_cast<kiln::v1::DType>(d));
      }
    }
    for (std::string_view trait : runtime::TraitNames(op.traits)) {
      support->add_traits(std::string(trait));
    }
  }
  for (const std::string& f : runtime::CpuFeatures()) resp->add_cpu_features(f);
  return absl::OkStatus();
}

MetricsSnapshot KilnService::CollectMetrics() {
  const CompileStats& cs = graphs_.stats();
  MetricsSnapshot m;
  m.compiles = cs.compiled.load();
  m.memory_cache_hits = cs.memory_hits.load();
  m.disk_cache_hits = cs.disk_hits.load();
  m.remote_cache_hits = cs.remote_hits.load();
  if (remote_ != nullptr) {
    const cache::RemoteStats& rs = remote_->stats();
    m.remote = true;
    m.remote_hits = rs.hits.load();
    m.remote_misses = rs.misses.load();
    m.remote_refused = rs.refused.load();
    m.remote_errors = rs.errors.load();
    m.remote_bytes_read = rs.bytes_read.load();
    m.remote_bytes_written = rs.bytes_written.load();
  }
  m.cache_misses = m.compiles;  // every miss compiles
  m.executes = executes_.load();
  m.execute_errors = execute_errors_.load();
  // In place first: the total read after it is never the smaller.
  m.input_bytes_in_place = input_bytes_in_place_.load();
  m.input_bytes = std::max(input_bytes_.load(), m.input_bytes_in_place);
  m.execute_seconds = execute_seconds_.Snapshot();
  m.compile_seconds = cs.seconds.Snapshot();
  m.constant_bytes = constants_.bytes();
  m.packed_weight_bytes = runtime::PackedConstantBytes();
  m.resident_bytes = ResidentBytes();
  m.clients = sessions_.count();
  const GraphCache::LiveGraphs live = graphs_.Live();
  m.live_graphs = live.count;
  m.plan_bytes = live.plan_bytes;
  m.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return m;
}

grpc::ServerUnaryReactor* KilnService::GetStats(grpc::CallbackServerContext* ctx,
                                                const kiln::v1::StatsRequest* req,
                                                kiln::v1::StatsResponse* resp) {
  if (absl::Status admitted = Admit(*ctx, /*while_draining=*/true); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("collecting stats", [&] { return DoGetStats(*ctx, *req, resp); }));
}

absl::Status KilnService::DoGetStats(const grpc::CallbackServerContext& ctx,
                                     const kiln::v1::StatsRequest& req,
                                     kiln::v1::StatsResponse* resp) {
  const MetricsSnapshot m = CollectMetrics();
  resp->set_runtime_version(cache::CompilerVersion());
  resp->set_graphs_compiled(m.compiles);
  resp->set_cache_hits(m.memory_cache_hits + m.disk_cache_hits + m.remote_cache_hits);
  resp->set_cache_misses(m.cache_misses);
  resp->set_memory_cache_hits(m.memory_cache_hits);
  resp->set_disk_cache_hits(m.disk_cache_hits);
  resp->set_remote_cache_hits(m.remote_cache_hits);
  resp->set_fleet_waits(graphs_.stats().fleet_waits.load());
  if (remote_ != nullptr) {
    resp->set_remote_cache(remote_->display_url());
    resp->set_remote_hits(m.remote_hits);
    resp->set_remote_misses(m.remote_misses);
    resp->set_remote_refused(m.remote_refused);
    resp->set_remote_errors(m.remote_errors);
    resp->set_remote_bytes_read(m.remote_bytes_read);
    resp->set_remote_bytes_written(m.remote_bytes_written);
  }
  resp->set_executes(m.executes);
  resp->set_execute_errors(m.execute_errors);
  resp->set_input_bytes(m.input_bytes);
  resp->set_input_bytes_in_place(m.input_bytes_in_place);
  resp->set_compile_seconds(m.compile_seconds.sum_s);
  resp->set_live_handles(sessions_.handle_count());
  resp->set_sessions(m.clients);
  resp->set_channels(sessions_.channel_count());
  resp->set_channel_calls(channel_calls_.load());
  resp->set_dynamic_graphs(dynamic_graphs_.load());
  resp->set_specializations(specializations_.load());
  resp->set_constants(constants_.count());
  resp->set_constant_bytes(m.constant_bytes);
  resp->set_constant_bytes_uploaded(constant_bytes_uploaded_.load());
  resp->set_constant_bytes_from_cache(constant_files_.loaded_bytes());
  resp->set_uptime_s(m.uptime_s);
  resp->set_cache_dir(artifacts_.enabled() ? artifacts_.dir() : "");
  if (artifacts_.enabled()) {
    resp->set_cache_bytes(artifacts_.total_bytes());
    resp->set_cache_max_bytes(artifacts_.max_bytes());
  }
  resp->set_pid(getpid());
  resp->set_packed_weight_bytes(m.packed_weight_bytes);
  resp->set_resident_bytes(m.resident_bytes);
  resp->set_live_graphs(m.live_graphs);
  resp->set_plan_bytes(m.plan_bytes);
  // Other clients' pids and names are the daemon's user's business: a
  // caller on the unix socket is that user (the listener checked), a TCP
  // caller holds only the token and sees its own session alone.
  const std::optional<PeerCredentials> peer =
      peers_ != nullptr ? peers_->PeerOf(ctx.peer()) : std::nullopt;
  const bool sees_every_session = peer.has_value() && peer->uid == geteuid();
  for (const auto& session : sessions_.All()) {
    if (!sees_every_session && session->id() != req.session_id()) continue;
    kiln::v1::ClientStats* c = resp->add_clients();
    c->set_session_id(session->id().substr(0, 8));
    c->set_pid(session->pid());
    c->set_client_name(session->client_name());
    c->set_handles(session->handle_count());
    c->set_channels(session->channel_count());
  }
  return absl::OkStatus();
}

}  // namespace kiln::server
