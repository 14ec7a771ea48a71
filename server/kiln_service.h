// The kiln.v1.Kiln gRPC service (callback API); its definitions are split
// by concern over kiln_service.cc (RPC adapters), kiln_service_execution.cc,
// kiln_service_clients.cc and kiln_service_stats.cc. Every handler validates its
// request, does the work through SessionRegistry / ConstantStore /
// GraphCache / the runtime executor, and maps errors with ToGrpcStatus.
// A bad request gets an error status and changes nothing else.
//
// Execute validates on gRPC's callback thread and runs the graph on one of
// the service's execution threads (runtime::WorkQueue), which finishes the
// call: gRPC has only a few callback threads for every call, and a long run
// must not hold one. Graphs known to run short (runtime::RunsShort) run on
// the callback thread itself.
//
// The same calls can come through call channels (OpenChannel): shared
// memory and a futex instead of gRPC, served on the channel's own thread,
// checked by the same code. Channel executions take one of as many slots
// as the work queue has threads.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "cache/artifact_store.h"
#include "cache/constant_files.h"
#include "cache/constant_store.h"
#include "cache/redis_store.h"
#include "kiln/v1/kiln.grpc.pb.h"
#include "runtime/exec/work_queue.h"
#include "server/execution_slots.h"
#include "server/client_limits.h"
#include "server/client_watcher.h"
#include "server/graph_cache.h"
#include "server/idle_tracker.h"
#include "server/latency_histogram.h"
#include "server/metrics_text.h"
#include "server/peer_listener.h"
#include "server/session.h"
#include "server/session_hold.h"
#include "server/test_call_gate.h"

namespace kiln::server {

struct PreparedRun;  // prepared_run.h

class KilnService final : public kiln::v1::Kiln::CallbackService {
 public:
  // `execution_threads` (0: runtime::ConfiguredThreads()) bounds how many
  // executions run at once; more wait in FIFO order. `cache_max_bytes` caps
  // the on-disk cache (0: no cap). Constants no compiled graph holds are
  // dropped after `constant_grace` without use.
  // `remote` (may be null): the fleet's Redis tier behind the cache
  // directory (cache/redis_store.h).
  explicit KilnService(std::string cache_dir, int execution_threads = 0,
                       uint64_t cache_max_bytes = cache::kDefaultArtifactCacheMaxBytes,
                       absl::Duration constant_grace = absl::Seconds(60),
                       std::unique_ptr<cache::RedisStore> remote = nullptr);

  // Who may call: `peers` vouches for the connections it accepted on the
  // daemon's unix socket (their user checked; OpenSession holds the pid a
  // client claims to the kernel's, client_identity.h). Every other call -
  // TCP, or any listener gRPC opened itself - must carry "authorization:
  // Bearer <tcp_token>"; an empty token refuses them all, and so does a
  // null `peers` for every call without it. Set before serving.
  void SetAccess(const PeerListener* peers, std::string tcp_token);
  void SetClientLimits(const ClientLimits& limits) { limits_ = limits; }
  // For tests (kilnd --test-call-gate): every run waits at `gate` first.
  // Set before serving.
  void SetTestCallGate(std::unique_ptr<TestCallGate> gate) { call_gate_ = std::move(gate); }
  void SetDaemonLimits(const DaemonLimits& limits) {
    daemon_limits_ = limits;
    sessions_.SetLimits(limits);
  }

  grpc::ServerUnaryReactor* OpenSession(grpc::CallbackServerContext* ctx,
                                        const kiln::v1::OpenSessionRequest* req,
                                        kiln::v1::OpenSessionResponse* resp) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* ctx,
                                         const kiln::v1::CloseSessionRequest* req,
                                         kiln::v1::CloseSessionResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* ctx,
                                           const kiln::v1::RegisterRegionRequest* req,
                                           kiln::v1::RegisterRegionResponse* resp) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* ctx,
                                             const kiln::v1::UnregisterRegionRequest* req,
                                             kiln::v1::UnregisterRegionResponse* resp) override;
  grpc::ServerUnaryReactor* GetCapabilities(grpc::CallbackServerContext* ctx,
                                            const kiln::v1::CapabilitiesRequest* req,
                                            kiln::v1::CapabilitiesResponse* resp) override;
  grpc::ServerUnaryReactor* QueryConstants(grpc::CallbackServerContext* ctx,
                                           const kiln::v1::QueryConstantsRequest* req,
                                           kiln::v1::QueryConstantsResponse* resp) override;
  grpc::ServerUnaryReactor* UploadConstants(grpc::CallbackServerContext* ctx,
                                            const kiln::v1::UploadConstantsRequest* req,
                                            kiln::v1::UploadConstantsResponse* resp) override;
  grpc::ServerUnaryReactor* Compile(grpc::CallbackServerContext* ctx,
                                    const kiln::v1::CompileRequest* req,
                                    kiln::v1::CompileResponse* resp) override;
  grpc::ServerUnaryReactor* Specialize(grpc::CallbackServerContext* ctx,
                                       const kiln::v1::SpecializeRequest* req,
                                       kiln::v1::CompileResponse* resp) override;
  grpc::ServerUnaryReactor* Execute(grpc::CallbackServerContext* ctx,
                                    const kiln::v1::ExecuteRequest* req,
                                    kiln::v1::ExecuteResponse* resp) override;
  grpc::ServerUnaryReactor* Release(grpc::CallbackServerContext* ctx,
                                    const kiln::v1::ReleaseRequest* req,
                                    kiln::v1::ReleaseResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx,
                                     const kiln::v1::StatsRequest* req,
                                     kiln::v1::StatsResponse* resp) override;
  grpc::ServerUnaryReactor* OpenChannel(grpc::CallbackServerContext* ctx,
                                        const kiln::v1::OpenChannelRequest* req,
                                        kiln::v1::OpenChannelResponse* resp) override;
  grpc::ServerUnaryReactor* CloseChannel(grpc::CallbackServerContext* ctx,
                                         const kiln::v1::CloseChannelRequest* req,
                                         kiln::v1::CloseChannelResponse* resp) override;
  // Open until the client's connection closes or the daemon shuts down;
  // see session_hold.h.
  grpc::ServerWriteReactor<kiln::v1::HoldResponse>* Hold(
      grpc::CallbackServerContext* ctx, const kiln::v1::HoldRequest* req) override;

  // The values --metrics-port serves: the counters GetStats reports, and
  // the latency histograms. Thread-safe.
  MetricsSnapshot CollectMetrics();

  // For --idle-exit-min: once no session has been open and no call in
  // flight for `idle_for`, refuses new calls from then on (Shutdown's first
  // step; the caller still calls Shutdown) and returns true. A session
  // opened at the same moment either keeps the daemon up (false) or is
  // refused UNAVAILABLE, never half-served. Thread-safe.
  bool BeginIdleShutdown(absl::Duration idle_for);

  // Before the gRPC server shuts down: stops every call channel (calls in
  // progress finish; calls posted later are answered UNAVAILABLE) and
  // refuses new ones. The destructor does it too.
  void Shutdown();
  ~KilnService() override;

 private:
  // OK for a call the daemon may serve; UNAUTHENTICATED for a call that
  // did not come through `peers_` and lacks the token, UNAVAILABLE once
  // shutting down (unless
  // `while_draining`: GetStats answers to the end, as clients waiting on a
  // call in flight ask it whether the daemon is still there).
  absl::Status Admit(const grpc::CallbackServerContext& ctx, bool while_draining = false) const;
  absl::Status DoOpenSession(const grpc::CallbackServerContext& ctx,
                             const kiln::v1::OpenSessionRequest& req,
                             kiln::v1::OpenSessionResponse* resp);
  // A Hold call ended without the daemon ending it: the client's process
  // has gone. Closes its session if the daemon cannot watch that process
  // (a watched one is closed by WatchOnce).
  void LoseHold(const std::string& session_id);
  // A closed session whose client has gone (exited, or its Hold dropped):
  // removes its /dev/shm objects, which the client cannot, and logs `how`.
  void ReleaseGoneClient(Session& session, const std::string& how);
  absl::Status DoGetCapabilities(kiln::v1::CapabilitiesResponse* resp);
  absl::Status DoGetStats(const grpc::CallbackServerContext& ctx,
                          const kiln::v1::StatsRequest& req, kiln::v1::StatsResponse* resp);
  absl::Status DoUpload(const kiln::v1::UploadConstantsRequest& req,
                        kiln::v1::UploadConstantsResponse* resp);
  absl::Status DoCompile(const kiln::v1::CompileRequest& req, kiln::v1::CompileResponse* resp);
  absl::Status DoSpecialize(const kiln::v1::SpecializeRequest& req,
                            kiln::v1::CompileResponse* resp);
  absl::Status DoOpenChannel(const kiln::v1::OpenChannelRequest& req,
                             kiln::v1::OpenChannelResponse* resp);
  // Runs a prepared execution (RunPrepared), waiting at the test gate
  // first if there is one.
  absl::Status RunGated(const PreparedRun& run);
  // One call from a channel of `session`, start to finish.
  absl::Status RunChannelCall(const Session& session, const ChannelCall& call);
  // Counts one execute (gRPC or channel) that began at `start`.
  void CountExecute(std::chrono::steady_clock::time_point start, bool ok);

  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  SessionRegistry sessions_;
  HoldBoard holds_;
  const PeerListener* peers_ = nullptr;
  std::string tcp_token_;
  ClientLimits limits_;
  DaemonLimits daemon_limits_;
  // Held while a channel is opened: the daemon-wide count is checked and
  // the new channel added as one step.
  absl::Mutex channel_open_mu_;
  const absl::Duration constant_grace_;
  cache::ConstantStore constants_;
  // Before the caches that use it.
  std::unique_ptr<cache::RedisStore> remote_;
  cache::ArtifactStore artifacts_;
  // After artifacts_, whose directory and cap it uses; its destructor
  // finishes the writes still queued.
  cache::ConstantFiles constant_files_;
  GraphCache graphs_;
  std::atomic<uint64_t> executes_{0};
  std::atomic<uint64_t> input_bytes_{0};           // StatsResponse.input_bytes
  std::atomic<uint64_t> input_bytes_in_place_{0};  // StatsResponse.input_bytes_in_place
  std::atomic<uint64_t> execute_errors_{0};
  std::atomic<uint64_t> channel_calls_{0};
  std::atomic<uint64_t> dynamic_graphs_{0};
  std::atomic<uint64_t> specializations_{0};
  std::atomic<uint64_t> constant_bytes_uploaded_{0};
  LatencyHistogram execute_seconds_{LatencyHistogram::ExecuteBounds()};
  IdleTracker idle_;
  // Orders opening a session against BeginIdleShutdown.
  absl::Mutex open_mu_;
  std::atomic<bool> shutting_down_{false};
  std::unique_ptr<TestCallGate> call_gate_;  // null but in tests
  // One look: exited clients, idle constants and arenas.
  void WatchOnce();
  // Calls WatchOnce every second; made once every member it uses is.
  std::unique_ptr<ClientWatcher> watcher_;
  ExecutionSlots channel_slots_;
  // Last member: destroyed first, running queued executions while
  // everything they use is still alive.
  runtime::WorkQueue executions_;
};

}  // namespace kiln::server
