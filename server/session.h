// Client sessions: each client process opens one and names only its own
// shared-memory regions and compiled handles through it.
//
// SessionRegistry is thread-safe. A Session's regions and handles are
// guarded by the session's mutex; the region and graph objects they point
// to are immutable and reference-counted, so a call may keep using them
// after a concurrent release.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "runtime/compile/compiled_graph.h"
#include "server/call_channel.h"
#include "server/client_limits.h"
#include "server/shm_region.h"
#include "server/graph_template.h"

namespace kiln::server {

class Session {
 public:
  // `pid`: the client's own (in its pid namespace; its region names start
  // with "kiln-<pid>-"). `watch_pid`: the same process as the daemon sees
  // it, when it can; its start time is taken now and ClientAlive() compares
  // (see process_watch.h).
  Session(std::string id, int pid, std::string client_name,
          std::optional<int> watch_pid = std::nullopt, ClientLimits limits = {},
          std::string client_key = "");
  // Stops the session's channels first: their threads use the session.
  ~Session() { StopChannels(); }

  const std::string& id() const { return id_; }
  int pid() const { return pid_; }
  // The pid the daemon watches (its own namespace's view), or 0.
  int watched_pid() const { return watch_pid_; }
  const std::string& client_name() const { return client_name_; }
  // Which client process holds it, for DaemonLimits::max_client_sessions.
  const std::string& client_key() const { return client_key_; }
  // False once the watched client process has exited; true when unwatched.
  bool ClientAlive() const;

  // INVALID_ARGUMENT unless `name` is "kiln-<pid>-..." of this client.
  absl::Status CheckRegionName(const std::string& name) const;
  // CheckRegionName; RESOURCE_EXHAUSTED past ClientLimits::max_region_bytes
  // or max_regions.
  absl::StatusOr<uint64_t> AddRegion(std::shared_ptr<ShmRegion> region);
  absl::Status RemoveRegion(uint64_t region_id);
  // NOT_FOUND naming the id when the region is not this session's.
  absl::StatusOr<std::shared_ptr<ShmRegion>> Region(uint64_t region_id) const;

  // RESOURCE_EXHAUSTED past ClientLimits::max_handles (with templates).
  absl::StatusOr<uint64_t> AddHandle(std::shared_ptr<const runtime::CompiledGraph> graph);
  absl::Status RemoveHandle(uint64_t handle);
  // NOT_FOUND for an unknown handle; FAILED_PRECONDITION for a template.
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> Handle(uint64_t handle) const;
  // Handles of dynamic-shape templates share the numbering (and Release);
  // RESOURCE_EXHAUSTED past max_templates or max_handles.
  absl::StatusOr<uint64_t> AddTemplate(std::shared_ptr<const GraphTemplate> tmpl);
  absl::StatusOr<std::shared_ptr<const GraphTemplate>> Template(uint64_t handle) const;
  size_t handle_count() const;
  // Counts `bytes` of newly stored constants against the client's cap;
  // RESOURCE_EXHAUSTED (and nothing counted) when they would pass it.
  absl::Status ChargeConstantBytes(uint64_t bytes);
  uint64_t region_bytes() const;
  // Removes the shared-memory objects behind the session's regions from
  // /dev/shm (the client has exited and cannot). Mappings stay valid until
  // the last call using them finishes. Returns how many were removed.
  int UnlinkRegions();

  // Takes over a started channel. RESOURCE_EXHAUSTED (and the channel is
  // stopped) past ClientLimits::max_channels.
  absl::StatusOr<uint64_t> AddChannel(std::unique_ptr<CallChannel> channel);
  // Stops and removes one channel; NOT_FOUND when it is not this session's.
  absl::Status RemoveChannel(uint64_t channel_id);
  // Stops every channel (a call in progress finishes first). Idempotent.
  void StopChannels();
  size_t channel_count() const;

 private:
  const std::string id_;
  const int pid_;
  const std::string client_name_;
  const std::string client_key_;
  const int watch_pid_;
  const std::optional<uint64_t> watched_start_ticks_;
  const ClientLimits limits_;
  mutable absl::Mutex mu_;
  uint64_t region_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t constant_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_region_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<ShmRegion>> regions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<const runtime::CompiledGraph>> handles_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<const GraphTemplate>> templates_
      ABSL_GUARDED_BY(mu_);
  // Own lock: stopping a channel waits for its call, which takes mu_.
  mutable absl::Mutex channels_mu_;
  uint64_t next_channel_ ABSL_GUARDED_BY(channels_mu_) = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<CallChannel>> channels_
      ABSL_GUARDED_BY(channels_mu_);
};

class SessionRegistry {
 public:
  explicit SessionRegistry(DaemonLimits limits = {}) : limits_(limits) {}
  void SetLimits(const DaemonLimits& limits) {
    absl::MutexLock lock(&mu_);
    limits_ = limits;
  }

  // `watch_pid`: the client process as the daemon sees it (its socket
  // peer, or its own pid when in the daemon's pid namespace); when given,
  // CloseExited() closes the session once that process is gone.
  // `client_key` names the client process for DaemonLimits::
  // max_client_sessions. RESOURCE_EXHAUSTED past that or max_sessions.
  absl::StatusOr<std::shared_ptr<Session>> Open(int pid, const std::string& client_name,
                                                std::optional<int> watch_pid = std::nullopt,
                                                const ClientLimits& limits = {},
                                                const std::string& client_key = "");
  // Forgets the session and stops its channels.
  absl::Status Close(const std::string& id);
  // Closes the sessions whose client process has exited; returns them.
  std::vector<std::shared_ptr<Session>> CloseExited();
  // Stops every session's channels (daemon shutdown); sessions stay open.
  void StopAllChannels();
  // NOT_FOUND when unknown (e.g. opened with a daemon that has restarted).
  absl::StatusOr<std::shared_ptr<Session>> Find(const std::string& id) const;
  size_t count() const;
  size_t handle_count() const;
  size_t channel_count() const;
  std::vector<std::shared_ptr<Session>> All() const;

 private:
  // Forgets `it`'s session (under mu_) and counts its client key down.
  std::shared_ptr<Session> Erase(
      absl::flat_hash_map<std::string, std::shared_ptr<Session>>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  DaemonLimits limits_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
  // Open sessions per client key.
  absl::flat_hash_map<std::string, uint64_t> per_client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
