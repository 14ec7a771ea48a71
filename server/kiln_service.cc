#include "server/kiln_service.h"

#include <malloc.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "cache/graph_key.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/kernels/onednn_util.h"
#include "runtime/ops/registry.h"
#include "runtime/util/cpu_features.h"
#include "runtime/util/status_macros.h"
#include "server/call_channel_layout.h"
#include "server/client_identity.h"
#include "server/overlap_check.h"
#include "server/process_watch.h"
#include "server/request_guard.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

// Finishes a unary call with `status` mapped to gRPC.
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Resolves bytes [offset, offset + byte_size) of one of the session's
// regions as a tensor of `expected` (dense, contiguous): the span must lie
// inside the region, hold the tensor and be aligned for its element type.
// With `keep`, the region is added to it, so the mapping outlives a
// concurrent UnregisterRegion while it is in use.
absl::StatusOr<uint8_t*> ResolveSlot(const Session& session, const TensorSlot& slot,
                                     const runtime::TensorMeta& expected, const std::string& what,
                                     std::vector<std::shared_ptr<ShmRegion>>* keep = nullptr) {
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

// A wire descriptor: its meta must be `expected` exactly, then as ResolveSlot.
absl::StatusOr<uint8_t*> ResolveDescriptor(const Session& session,
                                           const kiln::v1::TensorDescriptor& desc,
                                           const runtime::TensorMeta& expected,
                                           const std::string& what,
                                           std::vector<std::shared_ptr<ShmRegion>>* keep = nullptr) {
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

}  // namespace

KilnService::KilnService(std::string cache_dir, int execution_threads, uint64_t cache_max_bytes,
                         absl::Duration constant_grace)
    : constant_grace_(constant_grace),
      artifacts_(std::move(cache_dir), cache_max_bytes),
      constant_files_(&artifacts_),
      graphs_(&constants_, &artifacts_, &constant_files_),
      channel_slots_(execution_threads > 0 ? execution_threads : runtime::ConfiguredThreads()),
      executions_(execution_threads > 0 ? execution_threads : runtime::ConfiguredThreads()) {
  constants_.SetFiles(&constant_files_);
  constant_files_.InstallDeferredChecks();
  watcher_ = std::thread([this] { WatchClients(); });
}

KilnService::~KilnService() { Shutdown(); }

void KilnService::Shutdown() {
  shutting_down_.store(true);
  // gRPC's server waits for every call to end, and a Hold lasts as long as
  // its client: end them all now.
  holds_.EndAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd is shutting down"));
  {
    absl::MutexLock lock(&watch_mu_);
    watch_stop_ = true;
  }
  if (watcher_.joinable()) watcher_.join();
  sessions_.StopAllChannels();
}

void KilnService::WatchClients() {
  // Often enough that a crashed client's memory comes back promptly;
  // reading /proc/<pid>/stat per session is cheap.
  constexpr absl::Duration kWatchInterval = absl::Seconds(1);
  absl::MutexLock lock(&watch_mu_);
  while (!watch_mu_.AwaitWithTimeout(absl::Condition(&watch_stop_), kWatchInterval)) {
    watch_mu_.Unlock();
    if (absl::Status s = Guarded("watching clients", [&] {
          WatchOnce();
          return absl::OkStatus();
        });
        !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
    }
    watch_mu_.Lock();
  }
}

void KilnService::WatchOnce() {
  const auto exited = sessions_.CloseExited();
  if (!exited.empty()) idle_.Touch();
  for (const auto& s : exited) {
    ReleaseGoneClient(*s, absl::StrCat("client pid ", s->pid(), " exited"));
  }
  if (!exited.empty()) {
    // Objects a dead client created but never registered. Only old ones:
    // a client in another pid namespace (its pid unknown here) may be
    // between creating an object and registering it right now.
    if (int n = RemoveStaleRegions("/dev/shm", /*min_age_s=*/10); n > 0) {
      spdlog::info("removed {} shared-memory objects of exited clients", n);
    }
  }
  const cache::ConstantStore::Evicted evicted = constants_.EvictUnreferenced(constant_grace_);
  // Run arenas a burst of concurrent calls added, by the same measure of
  // "not used lately" as weights.
  const uint64_t arena_bytes = graphs_.TrimIdleArenas(absl::ToChronoSeconds(constant_grace_));
  if (arena_bytes > 0) {
    spdlog::debug("freed {:.1f} MiB of run arenas idle for {}", arena_bytes / 1048576.0,
                  absl::FormatDuration(constant_grace_));
    if (evicted.count == 0) malloc_trim(0);
  }
  if (evicted.count > 0) {
    // Weights are freed in pieces of every size; without a trim glibc
    // keeps the freed heap pages and the daemon's footprint stays.
    malloc_trim(0);
    spdlog::info("dropped {} constants ({:.1f} MiB) no compiled graph has used for {}",
                 evicted.count, evicted.bytes / 1048576.0, absl::FormatDuration(constant_grace_));
  }
}

void KilnService::SetAccess(const PeerListener* peers, std::string tcp_token) {
  peers_ = peers;
  tcp_token_ = std::move(tcp_token);
}

absl::Status KilnService::Admit(const grpc::CallbackServerContext& ctx,
                                bool while_draining) const {
  if (!while_draining && shutting_down_.load(std::memory_order_relaxed)) {
    return absl::UnavailableError("kilnd is shutting down");
  }
  // Let in on its credentials only what the daemon's own unix listener
  // accepted (it checked the peer's user). Every other way in needs the
  // token: TCP, and whatever else gRPC might be listening on.
  const std::string peer = ctx.peer();
  if (peers_ != nullptr && peers_->PeerOf(peer).has_value()) return absl::OkStatus();
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  const std::string expected = "Bearer " + tcp_token_;
  bool match = !tcp_token_.empty() && it != metadata.end() && it->second.size() == expected.size();
  if (match) {
    // Compared in constant time: no early exit that times the prefix.
    unsigned char diff = 0;
    for (size_t i = 0; i < expected.size(); ++i) diff |= it->second.data()[i] ^ expected[i];
    match = diff == 0;
  }
  if (!match) {
    const bool tcp = peer.rfind("ipv4:", 0) == 0 || peer.rfind("ipv6:", 0) == 0;
    return absl::UnauthenticatedError(
        tcp ? "calls over TCP need the daemon's token (clients set KILN_TOKEN)"
            : "calls that do not come through the daemon's own unix socket need the daemon's "
              "token (clients set KILN_TOKEN)");
  }
  return absl::OkStatus();
}

absl::Status KilnService::DoOpenSession(const grpc::CallbackServerContext& ctx,
                                        const kiln::v1::OpenSessionRequest& req,
                                        kiln::v1::OpenSessionResponse* resp) {
  // The client says who it is; over the unix socket the kernel says too,
  // and where it can, its word wins (client_identity.h).
  const std::optional<PeerCredentials> peer =
      peers_ != nullptr ? peers_->PeerOf(ctx.peer()) : std::nullopt;
  KILN_ASSIGN_OR_RETURN(
      ClientIdentity identity,
      ResolveClientIdentity(req.pid(), req.pid_namespace(), peer, OwnPidNamespace()));
  const int pid = identity.pid;
  const std::optional<int> watch = identity.watch;
  // Who holds the session, for --max-client-sessions: the process the
  // kernel names, else the pid claimed from the peer's address.
  std::string client_key;
  if (peer.has_value() && peer->pid > 0) {
    client_key = absl::StrCat("pid ", peer->pid);
  } else {
    const std::string address = ctx.peer();
    client_key = absl::StrCat(address.substr(0, address.rfind(':')), " pid ", pid);
  }
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&open_mu_);
    // Checked again under the lock: an idle shutdown may have begun since
    // Admit.
    if (shutting_down_.load()) return absl::UnavailableError("kilnd is shutting down");
    KILN_ASSIGN_OR_RETURN(session,
                          sessions_.Open(pid, req.client_name(), watch, limits_, client_key));
  }
  resp->set_session_id(session->id());
  resp->set_runtime_version(KILN_RUNTIME_VERSION);
  resp->set_hold_required(!watch.has_value());
  spdlog::info("session {} opened by pid {} ({}{})", session->id().substr(0, 8), pid,
               req.client_name(), watch.has_value() ? ", checked by its credentials" : "");
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::OpenSession(grpc::CallbackServerContext* ctx,
                                                   const kiln::v1::OpenSessionRequest* req,
                                                   kiln::v1::OpenSessionResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("opening a session", [&] { return DoOpenSession(*ctx, *req, resp); }));
}

grpc::ServerWriteReactor<kiln::v1::HoldResponse>* KilnService::Hold(
    grpc::CallbackServerContext* ctx, const kiln::v1::HoldRequest* req) {
  auto* hold = new HoldReactor(&holds_, [this, id = req->session_id()] { LoseHold(id); });
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) {
    hold->End(ToGrpcStatus(admitted));
  } else if (auto session = sessions_.Find(req->session_id()); !session.ok()) {
    hold->End(ToGrpcStatus(session.status()));
  } else if (!holds_.Add(hold)) {
    hold->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd is shutting down"));
  }
  return hold;
}

void KilnService::LoseHold(const std::string& session_id) {
  auto session = sessions_.Find(session_id);
  if (!session.ok() || (*session)->watched_pid() != 0) return;
  if (!sessions_.Close(session_id).ok()) return;  // closed meanwhile
  idle_.Touch();
  // Its Hold call ended: a client the daemon does not watch (TCP, or a pid
  // namespace the daemon does not see into) has gone.
  ReleaseGoneClient(**session, absl::StrCat("the Hold call of client pid ", (*session)->pid(),
                                            " (not watched) ended with its connection"));
}

void KilnService::ReleaseGoneClient(Session& session, const std::string& how) {
  const int unlinked = session.UnlinkRegions();
  spdlog::info("session {} closed: {} ({} handles released{})", session.id().substr(0, 8), how,
               session.handle_count(),
               unlinked > 0 ? absl::StrCat(", ", unlinked, " shared-memory objects removed") : "");
}

grpc::ServerUnaryReactor* KilnService::CloseSession(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::CloseSessionRequest* req,
                                                    kiln::v1::CloseSessionResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  absl::Status s = Guarded("closing a session", [&] { return sessions_.Close(req->session_id()); });
  idle_.Touch();
  if (s.ok()) spdlog::info("session {} closed", req->session_id().substr(0, 8));
  return Done(ctx, s);
}

grpc::ServerUnaryReactor* KilnService::RegisterRegion(grpc::CallbackServerContext* ctx,
                                                      const kiln::v1::RegisterRegionRequest* req,
                                                      kiln::v1::RegisterRegionResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("registering a region", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    // Checked before opening: another client's object is not even opened.
    KILN_RETURN_IF_ERROR(session->CheckRegionName(req->name()));
    KILN_ASSIGN_OR_RETURN(auto region, ShmRegion::Open(req->name(), req->byte_size()));
    KILN_ASSIGN_OR_RETURN(uint64_t id, session->AddRegion(std::move(region)));
    resp->set_region_id(id);
    return absl::OkStatus();
  }));
}

grpc::ServerUnaryReactor* KilnService::UnregisterRegion(
    grpc::CallbackServerContext* ctx, const kiln::v1::UnregisterRegionRequest* req,
    kiln::v1::UnregisterRegionResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("unregistering a region", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveRegion(req->region_id());
  }));
}

grpc::ServerUnaryReactor* KilnService::GetCapabilities(grpc::CallbackServerContext* ctx,
                                                       const kiln::v1::CapabilitiesRequest*,
                                                       kiln::v1::CapabilitiesResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("listing capabilities", [&] { return DoGetCapabilities(resp); }));
}

absl::Status KilnService::DoGetCapabilities(kiln::v1::CapabilitiesResponse* resp) {
  resp->set_runtime_version(KILN_RUNTIME_VERSION);
  resp->add_devices("CPU");
  for (const runtime::OpDef& op : runtime::AllOps()) {
    if (op.internal) continue;
    auto* support = resp->add_ops();
    support->set_target(op.target);
    for (int d = 1; d <= static_cast<int>(runtime::DType::kBool); ++d) {
      if (op.dtypes & runtime::DTypeBit(static_cast<runtime::DType>(d))) {
        support->add_dtypes(static_cast<kiln::v1::DType>(d));
      }
    }
  }
  for (const std::string& f : runtime::CpuFeatures()) resp->add_cpu_features(f);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::QueryConstants(grpc::CallbackServerContext* ctx,
                                                      const kiln::v1::QueryConstantsRequest* req,
                                                      kiln::v1::QueryConstantsResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("looking up constants", [&]() -> absl::Status {
    // Which weights the daemon holds says which models its clients run:
    // told only to a client with a session (and so an identity the daemon
    // checked).
    if (req->session_id().empty()) {
      return absl::InvalidArgumentError(
          "QueryConstants needs session_id: open a session first (OpenSession)");
    }
    KILN_RETURN_IF_ERROR(sessions_.Find(req->session_id()).status());
    for (const std::string& h : req->hashes()) {
      if (!constants_.Contains(h)) resp->add_missing(h);
    }
    return absl::OkStatus();
  }));
}

absl::Status KilnService::DoUpload(const kiln::v1::UploadConstantsRequest& req,
                                   kiln::v1::UploadConstantsResponse* resp) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  for (int i = 0; i < req.constants_size(); ++i) {
    const auto& c = req.constants(i);
    const std::string what = absl::StrCat("constant ", i, " (", c.hash(), ")");
    KILN_ASSIGN_OR_RETURN(runtime::TensorMeta meta, runtime::MetaFromProto(c.data().meta()));
    // `keep` holds the region mapped while its bytes are read, whatever
    // UnregisterRegion does meanwhile.
    std::vector<std::shared_ptr<ShmRegion>> keep;
    KILN_ASSIGN_OR_RETURN(uint8_t * data, ResolveDescriptor(*session, c.data(), meta, what, &keep));
    // In memory only: a file in the cache directory is not enough, as it
    // may yet fail its check, and the client has the bytes in hand.
    if (constants_.InMemory(c.hash())) {
      resp->set_already_present(resp->already_present() + 1);
      continue;
    }
    // Charged before storing (a constant the store holds already is free):
    // past the cap nothing is stored.
    const int64_t size = meta.ByteSize();
    KILN_RETURN_IF_ERROR(session->ChargeConstantBytes(static_cast<uint64_t>(size)));
    // The client's bytes are read once, into the daemon's memory, and only
    // that copy is hashed and stored: read twice, they could change between
    // the hash and the copy, and other clients would compute with bytes
    // that are not the content their hash names.
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<uint8_t> owned, cache::ConstantStore::Allocate(size));
    std::memcpy(owned.get(), data, static_cast<size_t>(size));
    if (absl::Status read = keep.front()->Check(); !read.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", read.message()));
    }
    KILN_ASSIGN_OR_RETURN(bool stored,
                          constants_.Put(c.hash(), runtime::ConstantData{std::move(owned), size}));
    if (stored) {
      constant_bytes_uploaded_ += static_cast<uint64_t>(meta.ByteSize());
      resp->set_stored(resp->stored() + 1);
    } else {
      resp->set_already_present(resp->already_present() + 1);
    }
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::UploadConstants(
    grpc::CallbackServerContext* ctx, const kiln::v1::UploadConstantsRequest* req,
    kiln::v1::UploadConstantsResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  return Done(ctx, Guarded("storing constants", [&] { return DoUpload(*req, resp); }));
}

namespace {

// VmRSS from /proc/self/statm (pages); 0 where that cannot be read.
uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

absl::Status FillCompileResponse(CompileResult result, bool want_dump, Session& session,
                                 kiln::v1::CompileResponse* resp) {
  for (const auto& meta : result.graph->output_metas) {
    runtime::MetaToProto(meta, resp->add_outputs());
  }
  resp->set_cache_hit(result.cache_hit);
  resp->set_compile_ms(result.compile_ms);
  resp->set_graph_key(result.key);
  if (want_dump) resp->set_dump(runtime::DumpCompiledGraph(*result.graph));
  KILN_ASSIGN_OR_RETURN(uint64_t handle, session.AddHandle(std::move(result.graph)));
  resp->set_handle(handle);
  return absl::OkStatus();
}

}  // namespace

absl::Status KilnService::DoCompile(const kiln::v1::CompileRequest& req,
                                    kiln::v1::CompileResponse* resp) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  if (static_cast<uint64_t>(req.graph().nodes_size()) > daemon_limits_.max_graph_nodes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the graph has ", req.graph().nodes_size(), " nodes; the daemon compiles at most ",
        daemon_limits_.max_graph_nodes, " (kilnd --max-graph-nodes)"));
  }
  std::map<std::string, std::string> options(req.options().begin(), req.options().end());
  if (IsDynamic(req.graph())) {
    // Checked now so a bad graph or option fails at compile, not per shape.
    KILN_RETURN_IF_ERROR(ValidateTemplate(req.graph()));
    KILN_RETURN_IF_ERROR(runtime::ParseCompileOptions(options).status());
    auto tmpl = std::make_shared<GraphTemplate>();
    tmpl->graph = req.graph();
    tmpl->options = std::move(options);
    tmpl->model_caching = req.model_caching();
    for (const auto& node : req.graph().nodes()) {
      tmpl->num_inputs += node.has_placeholder() ? 1 : 0;
      tmpl->num_sizes += node.has_size() ? 1 : 0;
    }
    // As the compiler does: every constant looked up, all missing reported.
    std::string first_missing;
    int missing = 0;
    for (const auto& node : req.graph().nodes()) {
      if (!node.has_constant()) continue;
      auto meta = runtime::MetaFromProto(node.constant().meta());
      KILN_RETURN_IF_ERROR(meta.status());
      auto data = constants_.Get(node.constant().hash(), meta->ByteSize());
      if (!data.ok()) {
        if (missing++ == 0) {
          first_missing = absl::StrCat("node '", node.name(), "': constant ", node.constant().hash());
        }
        continue;
      }
      tmpl->constants.push_back(*std::move(data));
    }
    if (missing > 0) return runtime::MissingConstantsError(first_missing, missing);
    tmpl->key = cache::GraphKey(tmpl->graph, tmpl->options);
    resp->set_dynamic(true);
    resp->set_graph_key(tmpl->key);
    spdlog::info("dynamic-shape graph {} ({} nodes, {} symbolic sizes): compiled per shape",
                 tmpl->key.substr(0, 12), tmpl->graph.nodes_size(), tmpl->num_sizes);
    KILN_ASSIGN_OR_RETURN(uint64_t handle, session->AddTemplate(std::move(tmpl)));
    resp->set_handle(handle);
    dynamic_graphs_++;
    return absl::OkStatus();
  }
  KILN_ASSIGN_OR_RETURN(CompileResult result,
                        graphs_.GetOrCompile(req.graph(), options, req.model_caching()));
  return FillCompileResponse(std::move(result), req.want_dump(), *session, resp);
}

absl::Status KilnService::DoSpecialize(const kiln::v1::SpecializeRequest& req,
                                       kiln::v1::CompileResponse* resp) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  KILN_ASSIGN_OR_RETURN(auto tmpl, session->Template(req.handle()));
  KILN_ASSIGN_OR_RETURN(kiln::v1::Graph graph,
                        SpecializeGraph(tmpl->graph, req.inputs(), req.sizes()));
  KILN_ASSIGN_OR_RETURN(CompileResult result,
                        graphs_.GetOrCompile(graph, tmpl->options, tmpl->model_caching,
                                             /*shape_variant=*/true));
  specializations_++;
  return FillCompileResponse(std::move(result), req.want_dump(), *session, resp);
}

grpc::ServerUnaryReactor* KilnService::Specialize(grpc::CallbackServerContext* ctx,
                                                  const kiln::v1::SpecializeRequest* req,
                                                  kiln::v1::CompileResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  absl::Status s = Guarded("specializing a graph", [&] { return DoSpecialize(*req, resp); });
  if (!s.ok()) spdlog::info("specialize refused: {}", s.ToString());
  return Done(ctx, s);
}

grpc::ServerUnaryReactor* KilnService::Compile(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::CompileRequest* req,
                                               kiln::v1::CompileResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  absl::Status s = Guarded("compiling a graph", [&] { return DoCompile(*req, resp); });
  if (!s.ok()) spdlog::info("compile refused: {}", s.ToString());
  return Done(ctx, s);
}

// One validated execution: the graph, the tensors' addresses, and owning
// references to everything those point into.
struct KilnService::PendingRun {
  std::chrono::steady_clock::time_point start;
  std::shared_ptr<const runtime::CompiledGraph> graph;
  std::vector<std::shared_ptr<ShmRegion>> regions;
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
};

absl::StatusOr<KilnService::PendingRun> KilnService::PrepareRun(
    const Session& session, uint64_t handle, absl::Span<const TensorSlot> inputs,
    absl::Span<const TensorSlot> outputs) {
  PendingRun run;
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
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(uint8_t * p, ResolveSlot(session, outputs[i], graph.output_metas[i],
                                                   absl::StrCat("output ", i), &run.regions));
    run.outputs.push_back(p);
    span(outputs[i], graph.output_metas[i], true, i);
  }
  KILN_RETURN_IF_ERROR(CheckOutputsDisjoint(absl::MakeSpan(spans)));
  return run;
}

absl::StatusOr<KilnService::PendingRun> KilnService::PrepareExecute(
    const kiln::v1::ExecuteRequest& req) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  KILN_ASSIGN_OR_RETURN(auto graph, session->Handle(req.handle()));
  // The wire descriptors carry metas: check them, then resolve as slots.
  std::vector<TensorSlot> inputs, outputs;
  auto check = [&](const auto& descs, const std::vector<runtime::TensorMeta>& metas,
                   const char* what, std::vector<TensorSlot>* slots) -> absl::Status {
    for (int i = 0; i < descs.size(); ++i) {
      if (static_cast<size_t>(i) < metas.size()) {
        auto p = ResolveDescriptor(*session, descs.Get(i), metas[i], absl::StrCat(what, " ", i));
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
    inputs.resize(req.inputs_size());
    outputs.resize(req.outputs_size());
  }
  return PrepareRun(*session, req.handle(), inputs, outputs);
}

absl::Status KilnService::ExecuteRun(const PendingRun& run) {
  if (call_gate_ != nullptr) call_gate_->Pass();
  absl::Status s = Guarded("running a graph",
                           [&] { return runtime::Execute(*run.graph, run.inputs, run.outputs); });
  // A region that shrank during the run read as zeros and swallowed what
  // was written: whatever the run says, its results are void.
  for (const auto& region : run.regions) KILN_RETURN_IF_ERROR(region->Check());
  return s;
}

void KilnService::CountExecute(std::chrono::steady_clock::time_point start, bool ok) {
  execute_seconds_.Observe(std::chrono::steady_clock::now() - start);
  executes_++;
  if (!ok) execute_errors_++;
}

absl::Status KilnService::RunChannelCall(const Session& session, const ChannelCall& call) {
  IdleTracker::Call in_flight = idle_.Begin();
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = Guarded("running a call", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(PendingRun run,
                          PrepareRun(session, call.handle, call.inputs, call.outputs));
    ExecutionSlots::Slot slot(&channel_slots_);
    return ExecuteRun(run);
  });
  channel_calls_++;
  CountExecute(start, s.ok());
  return s;
}

absl::Status KilnService::DoOpenChannel(const kiln::v1::OpenChannelRequest& req,
                                        kiln::v1::OpenChannelResponse* resp) {
  if (shutting_down_.load()) return absl::UnavailableError("kilnd is shutting down");
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  KILN_ASSIGN_OR_RETURN(auto block, session->Region(req.region_id()));
  // Serialized, so concurrent opens cannot pass the daemon-wide cap
  // together (channels only ever close without it).
  absl::MutexLock lock(&channel_open_mu_);
  if (const size_t open = sessions_.channel_count(); open >= daemon_limits_.max_channels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon has ", open, " call channels open, its cap (kilnd --max-channels); "
        "the client can use the Execute RPC instead"));
  }
  // The session owns the channel and stops it before it goes away, so the
  // runner may hold a plain pointer to it.
  const Session* s = session.get();
  KILN_ASSIGN_OR_RETURN(
      auto channel, CallChannel::Start(std::move(block), [this, s](const ChannelCall& call) {
        return RunChannelCall(*s, call);
      }));
  resp->set_max_tensors(channel->slots());
  resp->set_layout_version(kChannelLayoutVersion);
  KILN_ASSIGN_OR_RETURN(uint64_t id, session->AddChannel(std::move(channel)));
  resp->set_channel_id(id);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::OpenChannel(grpc::CallbackServerContext* ctx,
                                                   const kiln::v1::OpenChannelRequest* req,
                                                   kiln::v1::OpenChannelResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("opening a call channel", [&] { return DoOpenChannel(*req, resp); }));
}

grpc::ServerUnaryReactor* KilnService::CloseChannel(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::CloseChannelRequest* req,
                                                    kiln::v1::CloseChannelResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("closing a call channel", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveChannel(req->channel_id());
  }));
}

grpc::ServerUnaryReactor* KilnService::Execute(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::ExecuteRequest* req,
                                               kiln::v1::ExecuteResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<PendingRun> run;
  if (absl::Status s = Guarded("preparing a run", [&] {
        run = PrepareExecute(*req);
        return run.status();
      });
      !s.ok()) {
    CountExecute(start, false);
    return Done(ctx, s);
  }
  // The call stays open (req, resp and ctx alive) until Finish.
  auto* reactor = ctx->DefaultReactor();
  const bool short_run = runtime::RunsShort(*run->graph);
  auto execute = [this, reactor, resp, start, in_flight = std::move(in_flight),
                  run = *std::move(run)]() mutable {
    absl::Status s = ExecuteRun(run);
    resp->set_run_us(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - run.start)
            .count());
    CountExecute(start, s.ok());
    run = PendingRun();  // let go of the regions before the client hears back
    reactor->Finish(ToGrpcStatus(s));
  };
  // A run known to be short holds this thread no longer than the call's
  // own handling does, and skips a thread hand-off, which for a tiny model
  // is a visible share of the daemon's CPU per call.
  if (short_run) {
    execute();
  } else if (absl::Status queued = Guarded("queueing a run", [&] {
               executions_.Submit(std::move(execute));
               return absl::OkStatus();
             });
             !queued.ok()) {
    CountExecute(start, false);
    reactor->Finish(ToGrpcStatus(queued));
  }
  return reactor;
}

grpc::ServerUnaryReactor* KilnService::Release(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::ReleaseRequest* req,
                                               kiln::v1::ReleaseResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("releasing a handle", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveHandle(req->handle());
  }));
}

MetricsSnapshot KilnService::CollectMetrics() {
  const CompileStats& cs = graphs_.stats();
  MetricsSnapshot m;
  m.compiles = cs.compiled.load();
  m.memory_cache_hits = cs.memory_hits.load();
  m.disk_cache_hits = cs.disk_hits.load();
  m.cache_misses = m.compiles;  // every miss compiles
  m.executes = executes_.load();
  m.execute_errors = execute_errors_.load();
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

bool KilnService::BeginIdleShutdown(absl::Duration idle_for) {
  absl::MutexLock lock(&open_mu_);
  if (shutting_down_.load() || sessions_.count() > 0 ||
      absl::FromChrono(idle_.IdleFor()) < idle_for) {
    return false;
  }
  shutting_down_.store(true);
  return true;
}

grpc::ServerUnaryReactor* KilnService::GetStats(grpc::CallbackServerContext* ctx,
                                                const kiln::v1::StatsRequest* req,
                                                kiln::v1::StatsResponse* resp) {
  if (absl::Status admitted = Admit(*ctx, /*while_draining=*/true); !admitted.ok()) return Done(ctx, admitted);
  return Done(ctx, Guarded("collecting stats", [&] { return DoGetStats(*ctx, *req, resp); }));
}

absl::Status KilnService::DoGetStats(const grpc::CallbackServerContext& ctx,
                                     const kiln::v1::StatsRequest& req,
                                     kiln::v1::StatsResponse* resp) {
  const MetricsSnapshot m = CollectMetrics();
  resp->set_runtime_version(KILN_RUNTIME_VERSION);
  resp->set_graphs_compiled(m.compiles);
  resp->set_cache_hits(m.memory_cache_hits + m.disk_cache_hits);
  resp->set_cache_misses(m.cache_misses);
  resp->set_memory_cache_hits(m.memory_cache_hits);
  resp->set_disk_cache_hits(m.disk_cache_hits);
  resp->set_executes(m.executes);
  resp->set_execute_errors(m.execute_errors);
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
