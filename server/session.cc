#include "server/session.h"

#include <sys/mman.h>
#include <sys/random.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/util/status_macros.h"
#include "server/process_watch.h"

namespace kiln::server {

Session::Session(std::string id, int pid, std::string client_name,
                 std::optional<int> watch_pid, ClientLimits limits, std::string client_key)
    : id_(std::move(id)),
      pid_(pid),
      client_name_(std::move(client_name)),
      client_key_(std::move(client_key)),
      watch_pid_(watch_pid.value_or(0)),
      watched_start_ticks_(watch_pid ? ProcessStartTicks(*watch_pid) : std::nullopt),
      limits_(limits) {}

absl::Status Session::CheckRegionName(const std::string& name) const {
  // A client names only what it created: its regions carry its pid, so it
  // cannot map (or have the daemon unlink) another client's.
  const std::string prefix = absl::StrCat("kiln-", pid_, "-");
  if (name.compare(0, prefix.size(), prefix) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region '", name, "' is not this client's: its name must start with '", prefix, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Session::AddRegion(std::shared_ptr<ShmRegion> region) {
  KILN_RETURN_IF_ERROR(CheckRegionName(region->name()));
  absl::MutexLock lock(&mu_);
  if (regions_.size() >= limits_.max_regions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client has ", regions_.size(), " regions registered, the per-client cap "
        "(kilnd --max-client-regions); unregister some first"));
  }
  if (region->size() > limits_.max_region_bytes - std::min(region_bytes_, limits_.max_region_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client has ", region_bytes_, " bytes of shared memory registered; ", region->size(),
        " more would pass the per-client cap of ", limits_.max_region_bytes,
        " (kilnd --max-client-shm-mb)"));
  }
  region_bytes_ += region->size();
  uint64_t id = next_region_++;
  regions_.emplace(id, std::move(region));
  return id;
}

absl::Status Session::RemoveRegion(uint64_t region_id) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(region_id);
  if (it == regions_.end()) {
    return absl::NotFoundError(absl::StrCat("region ", region_id, " is not registered"));
  }
  region_bytes_ -= it->second->size();
  regions_.erase(it);
  return absl::OkStatus();
}

uint64_t Session::region_bytes() const {
  absl::MutexLock lock(&mu_);
  return region_bytes_;
}

int Session::UnlinkRegions() {
  absl::MutexLock lock(&mu_);
  int removed = 0;
  for (const auto& [id, region] : regions_) {
    removed += shm_unlink(("/" + region->name()).c_str()) == 0 ? 1 : 0;
  }
  return removed;
}

absl::Status Session::ChargeConstantBytes(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > limits_.max_constant_bytes - std::min(constant_bytes_, limits_.max_constant_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client has uploaded ", constant_bytes_, " bytes of constants; ", bytes,
        " more would pass the per-client cap of ", limits_.max_constant_bytes,
        " (kilnd --max-client-constant-mb)"));
  }
  constant_bytes_ += bytes;
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

namespace {

absl::Status HandleCap(size_t open, uint64_t cap) {
  if (open < cap) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the client holds ", open, " handles, the per-client cap (kilnd --max-client-handles); "
      "release some (or call torch.compiler.reset()) first"));
}

}  // namespace

absl::StatusOr<uint64_t> Session::AddHandle(std::shared_ptr<const runtime::CompiledGraph> graph) {
  absl::MutexLock lock(&mu_);
  KILN_RETURN_IF_ERROR(HandleCap(handles_.size() + templates_.size(), limits_.max_handles));
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

absl::StatusOr<uint64_t> Session::AddTemplate(std::shared_ptr<const GraphTemplate> tmpl) {
  absl::MutexLock lock(&mu_);
  KILN_RETURN_IF_ERROR(HandleCap(handles_.size() + templates_.size(), limits_.max_handles));
  if (templates_.size() >= limits_.max_templates) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client holds ", templates_.size(), " dynamic-shape graphs, the per-client cap "
        "(kilnd --max-client-templates); release some first"));
  }
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
  if (channels_.size() >= limits_.max_channels) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the client has ", channels_.size(), " call channels open, the per-client cap "
        "(kilnd --max-client-channels)"));
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
  return ProcessStartTicks(watch_pid_) == watched_start_ticks_;
}

absl::StatusOr<std::shared_ptr<Session>> SessionRegistry::Open(
    int pid, const std::string& client_name, std::optional<int> watch_pid,
    const ClientLimits& limits, const std::string& client_key) {
  // The id is the session's only credential on the wire: 128 bits from the
  // kernel's generator, not a seeded PRNG whose state its outputs reveal.
  uint64_t words[2] = {0, 0};
  uint8_t* bytes = reinterpret_cast<uint8_t*>(words);
  for (size_t got = 0; got < sizeof(words);) {
    ssize_t n = getrandom(bytes + got, sizeof(words) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string id = absl::StrFormat("%016x%016x", words[0], words[1]);
  absl::MutexLock lock(&mu_);
  if (sessions_.size() >= limits_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the daemon has ", sessions_.size(), " sessions open, its cap (kilnd --max-sessions)"));
  }
  auto mine = per_client_.find(client_key);
  if (mine != per_client_.end() && mine->second >= limits_.max_client_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this client process has ", mine->second, " sessions open, the per-process cap "
        "(kilnd --max-client-sessions); close one first"));
  }
  ++per_client_[client_key];
  auto session = std::make_shared<Session>(id, pid, client_name, watch_pid, limits, client_key);
  sessions_.emplace(id, session);
  return session;
}

std::shared_ptr<Session> SessionRegistry::Erase(
    absl::flat_hash_map<std::string, std::shared_ptr<Session>>::iterator it) {
  std::shared_ptr<Session> session = std::move(it->second);
  sessions_.erase(it);
  auto count = per_client_.find(session->client_key());
  if (count != per_client_.end() && --count->second == 0) per_client_.erase(count);
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
    session = Erase(it);
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
