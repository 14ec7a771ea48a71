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
#include "server/shm_region.h"
#include "server/specialize.h"

namespace kiln::server {

// Call channels one session may open (one per client thread that executes).
inline constexpr size_t kMaxChannelsPerSession = 64;

class Session {
 public:
  // `watched_start_ticks`: the client process's start time when the daemon
  // can watch it (same pid namespace; see process_watch.h), else nullopt.
  Session(std::string id, int pid, std::string client_name,
          std::optional<uint64_t> watched_start_ticks = std::nullopt)
      : id_(std::move(id)),
        pid_(pid),
        client_name_(std::move(client_name)),
        watched_start_ticks_(watched_start_ticks) {}
  // Stops the session's channels first: their threads use the session.
  ~Session() { StopChannels(); }

  const std::string& id() const { return id_; }
  int pid() const { return pid_; }
  const std::string& client_name() const { return client_name_; }
  // False once the watched client process has exited; true when unwatched.
  bool ClientAlive() const;

  uint64_t AddRegion(std::shared_ptr<ShmRegion> region);
  absl::Status RemoveRegion(uint64_t region_id);
  // NOT_FOUND naming the id when the region is not this session's.
  absl::StatusOr<std::shared_ptr<ShmRegion>> Region(uint64_t region_id) const;

  uint64_t AddHandle(std::shared_ptr<const runtime::CompiledGraph> graph);
  absl::Status RemoveHandle(uint64_t handle);
  // NOT_FOUND for an unknown handle; FAILED_PRECONDITION for a template.
  absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> Handle(uint64_t handle) const;
  // Handles of dynamic-shape templates share the numbering (and Release).
  uint64_t AddTemplate(std::shared_ptr<const GraphTemplate> tmpl);
  absl::StatusOr<std::shared_ptr<const GraphTemplate>> Template(uint64_t handle) const;
  size_t handle_count() const;

  // Takes over a started channel. RESOURCE_EXHAUSTED (and the channel is
  // stopped) past kMaxChannelsPerSession.
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
  const std::optional<uint64_t> watched_start_ticks_;
  mutable absl::Mutex mu_;
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
  // `pid_namespace`: the client's (OpenSessionRequest.pid_namespace); when
  // it is the daemon's own, the session is closed by CloseExited() once the
  // client process is gone.
  std::shared_ptr<Session> Open(int pid, const std::string& client_name,
                                uint64_t pid_namespace = 0);
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
  std::vector<std::shared_ptr<Session>> All() const;

  // Takes over a started channel. RESOURCE_EXHAUSTED (and the channel is
  // stopped) past kMaxChannelsPerSession.
  absl::StatusOr<uint64_t> AddChannel(std::unique_ptr<CallChannel> channel);
  // Stops and removes one channel; NOT_FOUND when it is not this session's.
  absl::Status RemoveChannel(uint64_t channel_id);
  // Stops every channel (a call in progress finishes first). Idempotent.
  void StopChannels();
  size_t channel_count() const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kiln::server
