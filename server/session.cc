#include "server/session.h"

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/process_watch.h"

namespace kiln::server {

uint64_t Session::AddRegion(std::shared_ptr<ShmRegion> region) {
  absl::MutexLock lock(&mu_);
  uint64_t id = next_region_++;
  regions_.emplace(id, std::move(region));
  return id;
}

absl::Status Session::RemoveRegion(uint64_t region_id) {
  absl::MutexLock lock(&mu_);
  if (regions_.erase(region_id) == 0) {
    return absl::NotFoundError(absl::StrCat("region ", region_id, " is not registered"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShmRegion>> Session::Region(uint64_t region_id) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("region ", region_id, " is not registered in this session"));
  }
  return it->second;
}

uint64_t Session::AddHandle(std::shared_ptr<const runtime::CompiledGraph> graph) {
  absl::MutexLock lock(&mu_);
  uint64_t id = next_handle_++;
  handles_.emplace(id, std::move(graph));
  return id;
}

absl::Status Session::RemoveHandle(uint64_t handle) {
  absl::MutexLock lock(&mu_);
  if (handles_.erase(handle) == 0 && templates_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("handle ", handle, " is not open in this session"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const runtime::CompiledGraph>> Session::Handle(
    uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = handles_.find(handle);
  if (it == handles_.end()) {
    if (templates_.contains(handle)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "handle ", handle, " is a dynamic-shape graph: execute a handle Specialize returns"));
    }
    return absl::NotFoundError(absl::StrCat("handle ", handle, " is not open in this session"));
  }
  return it->second;
}

uint64_t Session::AddTemplate(std::shared_ptr<const GraphTemplate> tmpl) {
  absl::MutexLock lock(&mu_);
  uint64_t id = next_handle_++;
  templates_.emplace(id, std::move(tmpl));
  return id;
}

absl::StatusOr<std::shared_ptr<const GraphTemplate>> Session::Template(uint64_t handle) const {
  absl::MutexLock lock(&mu_);
  auto it = templates_.find(handle);
  if (it == templates_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "handle ", handle, " is not a dynamic-shape graph open in this session"));
  }
  return it->second;
}

size_t Session::handle_count() const {
  absl::MutexLock lock(&mu_);
  return handles_.size() + templates_.size();
}

absl::StatusOr<uint64_t> Session::AddChannel(std::unique_ptr<CallChannel> channel) {
  absl::MutexLock lock(&channels_mu_);
  if (channels_.size() >= kMaxChannelsPerSession) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "a session may open at most ", kMaxChannelsPerSession, " call channels"));
  }
  uint64_t id = next_channel_++;
  channels_.emplace(id, std::move(channel));
  return id;
}

absl::Status Session::RemoveChannel(uint64_t channel_id) {
  std::unique_ptr<CallChannel> channel;
  {
    absl::MutexLock lock(&channels_mu_);
    auto it = channels_.find(channel_id);
    if (it == channels_.end()) {
      return absl::NotFoundError(
          absl::StrCat("channel ", channel_id, " is not open in this session"));
    }
    channel = std::move(it->second);
    channels_.erase(it);
  }
  channel->Stop();
  return absl::OkStatus();
}

void Session::StopChannels() {
  absl::flat_hash_map<uint64_t, std::unique_ptr<CallChannel>> channels;
  {
    absl::MutexLock lock(&channels_mu_);
    channels.swap(channels_);
  }
  // All asked first, then joined: each may take a wake interval to notice.
  for (auto& [id, c] : channels) c->RequestStop();
  for (auto& [id, c] : channels) c->Join();
}

size_t Session::channel_count() const {
  absl::MutexLock lock(&channels_mu_);
  return channels_.size();
}

bool Session::ClientAlive() const {
  if (!watched_start_ticks_) return true;
  return ProcessStartTicks(pid_) == watched_start_ticks_;
}

std::shared_ptr<Session> SessionRegistry::Open(int pid, const std::string& client_name,
                                               uint64_t pid_namespace) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = absl::StrFormat("%016x%016x", rng(), rng());
  std::optional<uint64_t> start;
  if (pid_namespace != 0 && pid_namespace == OwnPidNamespace()) start = ProcessStartTicks(pid);
  auto session = std::make_shared<Session>(id, pid, client_name, start);
  absl::MutexLock lock(&mu_);
  sessions_.emplace(id, session);
  return session;
}

absl::Status SessionRegistry::Close(const std::string& id) {
  std::shared_ptr<Session> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(id);
    if (it == sessions_.end()) {
      return absl::NotFoundError(absl::StrCat("session ", id, " is not open"));
    }
    session = std::move(it->second);
    sessions_.erase(it);
  }
  // Now, not when the last in-flight call lets go of the session.
  session->StopChannels();
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Session>> SessionRegistry::CloseExited() {
  std::vector<std::shared_ptr<Session>> all, exited;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) all.push_back(s);
  }
  for (const auto& s : all) {
    if (!s->ClientAlive() && Close(s->id()).ok()) exited.push_back(s);
  }
  return exited;
}

void SessionRegistry::StopAllChannels() {
  std::vector<std::shared_ptr<Session>> sessions;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : sessions_) sessions.push_back(s);
  }
  for (const auto& s : sessions) s->StopChannels();
}

absl::StatusOr<std::shared_ptr<Session>> SessionRegistry::Find(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  if (it == sessions_.end()) {
    return absl::NotFoundError(absl::StrCat("session '", id, "' is not open (daemon restarted?)"));
  }
  return it->second;
}

size_t SessionRegistry::count() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

std::vector<std::shared_ptr<Session>> SessionRegistry::All() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Session>> all;
  for (const auto& [id, s] : sessions_) all.push_back(s);
  return all;
}

size_t SessionRegistry::handle_count() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->handle_count();
  return n;
}

size_t SessionRegistry::channel_count() const {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s->channel_count();
  return n;
}

}  // namespace kiln::server
