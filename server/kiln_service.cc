// KilnService: construction, admission, and the thin RPC adapters for
// sessions, regions, constants and compiles. Each handler admits the call,
// runs its Do* body under Guarded() and finishes with the mapped status.
// The execution path, the clients' lifetimes and the daemon's reports are
// in kiln_service_execution.cc, kiln_service_clients.cc and
// kiln_service_stats.cc.
#include "server/kiln_service.h"

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/compiler_version.h"
#include "cache/graph_key.h"
#include "runtime/compile/compiler.h"
#include "runtime/compile/dump.h"
#include "runtime/exec/executor.h"
#include "runtime/ir/from_proto.h"
#include "runtime/ir/specialize.h"
#include "runtime/util/status_macros.h"
#include "server/client_identity.h"
#include "server/prepared_run.h"
#include "server/process_watch.h"
#include "server/request_guard.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

absl::Status FillCompileResponse(CompileResult result, bool want_dump, Session& session,
                                 kiln::v1::CompileResponse* resp) {
  for (const auto& meta : result.graph->output_metas) {
    runtime::MetaToProto(meta, resp->add_outputs());
  }
  resp->set_cache_hit(result.cache_hit);
  resp->set_compile_ms(result.compile_ms);
  resp->set_graph_key(result.key);
  resp->set_options(runtime::CompileOptionsString(result.graph->options()));
  if (want_dump) resp->set_dump(runtime::DumpCompiledGraph(*result.graph));
  KILN_ASSIGN_OR_RETURN(uint64_t handle, session.AddHandle(std::move(result.graph)));
  resp->set_handle(handle);
  return absl::OkStatus();
}

}  // namespace

KilnService::KilnService(std::string cache_dir, int execution_threads, uint64_t cache_max_bytes,
                         absl::Duration constant_grace, std::unique_ptr<cache::RedisStore> remote)
    : constant_grace_(constant_grace),
      remote_(std::move(remote)),
      artifacts_(std::move(cache_dir), cache_max_bytes),
      constant_files_(&artifacts_, remote_.get()),
      graphs_(&constants_, &artifacts_, &constant_files_, remote_.get()),
      channel_slots_(execution_threads > 0 ? execution_threads : runtime::ConfiguredThreads()),
      executions_(execution_threads > 0 ? execution_threads : runtime::ConfiguredThreads()) {
  constants_.SetFiles(&constant_files_);
  constant_files_.InstallDeferredChecks();
  // Often enough that a crashed client's memory comes back promptly;
  // reading /proc/<pid>/stat per session is cheap.
  constexpr absl::Duration kWatchInterval = absl::Seconds(1);
  watcher_ = std::make_unique<ClientWatcher>(kWatchInterval, [this] { WatchOnce(); });
}

KilnService::~KilnService() { Shutdown(); }

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
  resp->set_runtime_version(cache::CompilerVersion());
  resp->set_hold_required(!watch.has_value());
  spdlog::info("session {} opened by pid {} ({}{})", session->id().substr(0, 8), pid,
               req.client_name(), watch.has_value() ? ", checked by its credentials" : "");
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KilnService::OpenSession(grpc::CallbackServerContext* ctx,
                                                   const kiln::v1::OpenSessionRequest* req,
                                                   kiln::v1::OpenSessionResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("opening a session", [&] { return DoOpenSession(*ctx, *req, resp); }));
}

grpc::ServerUnaryReactor* KilnService::CloseSession(grpc::CallbackServerContext* ctx,
                                                    const kiln::v1::CloseSessionRequest* req,
                                                    kiln::v1::CloseSessionResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  absl::Status s = Guarded("closing a session", [&] { return sessions_.Close(req->session_id()); });
  idle_.Touch();
  if (s.ok()) spdlog::info("session {} closed", req->session_id().substr(0, 8));
  return FinishUnary(ctx, s);
}

grpc::ServerUnaryReactor* KilnService::RegisterRegion(grpc::CallbackServerContext* ctx,
                                                      const kiln::v1::RegisterRegionRequest* req,
                                                      kiln::v1::RegisterRegionResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("registering a region", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    // Checked before opening: another client's object is not even opened.
    KILN_RETURN_IF_ERROR(session->CheckRegionName(req->name()));
    KILN_ASSIGN_OR_RETURN(auto region, ShmRegion::Open(req->name(), req->byte_size()));
    region->set_output_block(req->output_block());
    KILN_ASSIGN_OR_RETURN(uint64_t id, session->AddRegion(std::move(region)));
    resp->set_region_id(id);
    return absl::OkStatus();
  }));
}

grpc::ServerUnaryReactor* KilnService::UnregisterRegion(
    grpc::CallbackServerContext* ctx, const kiln::v1::UnregisterRegionRequest* req,
    kiln::v1::UnregisterRegionResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("unregistering a region", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveRegion(req->region_id());
  }));
}

grpc::ServerUnaryReactor* KilnService::QueryConstants(grpc::CallbackServerContext* ctx,
                                                      const kiln::v1::QueryConstantsRequest* req,
                                                      kiln::v1::QueryConstantsResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("looking up constants", [&]() -> absl::Status {
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
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  return FinishUnary(ctx, Guarded("storing constants", [&] { return DoUpload(*req, resp); }));
}

grpc::ServerUnaryReactor* KilnService::Release(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::ReleaseRequest* req,
                                               kiln::v1::ReleaseResponse*) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  return FinishUnary(ctx, Guarded("releasing a handle", [&]() -> absl::Status {
    KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req->session_id()));
    return session->RemoveHandle(req->handle());
  }));
}

absl::Status KilnService::DoCompile(const kiln::v1::CompileRequest& req,
                                    kiln::v1::CompileResponse* resp) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  if (static_cast<uint64_t>(req.graph().nodes_size()) > daemon_limits_.max_graph_nodes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the graph has ", req.graph().nodes_size(), " nodes; the daemon compiles at most ",
        daemon_limits_.max_graph_nodes, " (kilnd --max-graph-nodes)"));
  }
  std::map<std::string, std::string> options(req.options().begin(), req.options().end());
  if (runtime::IsDynamic(req.graph())) {
    // Checked now so a bad graph or option fails at compile, not per shape.
    KILN_RETURN_IF_ERROR(runtime::ValidateTemplate(req.graph()));
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
    std::vector<std::string> missing;
    for (const auto& node : req.graph().nodes()) {
      if (!node.has_constant()) continue;
      auto meta = runtime::MetaFromProto(node.constant().meta());
      KILN_RETURN_IF_ERROR(meta.status());
      auto data = constants_.Get(node.constant().hash(), meta->ByteSize());
      if (!data.ok()) {
        if (missing.empty()) {
          first_missing = absl::StrCat("node '", node.name(), "': constant ", node.constant().hash());
        }
        missing.push_back(node.constant().hash());
        continue;
      }
      tmpl->constants.push_back(*std::move(data));
    }
    if (!missing.empty()) {
      absl::Status status = runtime::MissingConstantsError(first_missing, missing);
      if (!req.report_missing()) return status;
      for (std::string& hash : runtime::MissingConstantsOf(status)) {
        resp->add_missing_constants(std::move(hash));
      }
      return absl::OkStatus();
    }
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
  absl::StatusOr<CompileResult> result =
      graphs_.GetOrCompile(req.graph(), options, req.model_caching());
  if (!result.ok() && req.report_missing()) {
    std::vector<std::string> missing = runtime::MissingConstantsOf(result.status());
    if (!missing.empty()) {
      for (std::string& hash : missing) resp->add_missing_constants(std::move(hash));
      return absl::OkStatus();
    }
  }
  if (!result.ok()) return result.status();
  return FillCompileResponse(*std::move(result), req.want_dump(), *session, resp);
}

absl::Status KilnService::DoSpecialize(const kiln::v1::SpecializeRequest& req,
                                       kiln::v1::CompileResponse* resp) {
  KILN_ASSIGN_OR_RETURN(auto session, sessions_.Find(req.session_id()));
  KILN_ASSIGN_OR_RETURN(auto tmpl, session->Template(req.handle()));
  KILN_ASSIGN_OR_RETURN(kiln::v1::Graph graph,
                        runtime::SpecializeGraph(tmpl->graph, req.inputs(), req.sizes()));
  KILN_ASSIGN_OR_RETURN(CompileResult result,
                        graphs_.GetOrCompile(graph, tmpl->options, tmpl->model_caching,
                                             /*shape_variant=*/true));
  specializations_++;
  return FillCompileResponse(std::move(result), req.want_dump(), *session, resp);
}

grpc::ServerUnaryReactor* KilnService::Specialize(grpc::CallbackServerContext* ctx,
                                                  const kiln::v1::SpecializeRequest* req,
                                                  kiln::v1::CompileResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  absl::Status s = Guarded("specializing a graph", [&] { return DoSpecialize(*req, resp); });
  if (!s.ok()) spdlog::info("specialize refused: {}", s.ToString());
  return FinishUnary(ctx, s);
}

grpc::ServerUnaryReactor* KilnService::Compile(grpc::CallbackServerContext* ctx,
                                               const kiln::v1::CompileRequest* req,
                                               kiln::v1::CompileResponse* resp) {
  if (absl::Status admitted = Admit(*ctx); !admitted.ok()) return FinishUnary(ctx, admitted);
  IdleTracker::Call in_flight = idle_.Begin();
  absl::Status s = Guarded("compiling a graph", [&] { return DoCompile(*req, resp); });
  if (!s.ok()) spdlog::info("compile refused: {}", s.ToString());
  return FinishUnary(ctx, s);
}

}  // namespace kiln::server
