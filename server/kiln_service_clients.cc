// KilnService: the clients' lifetimes. The watcher closes the sessions of
// exited clients (and drops idle constants and arenas); a Hold call stands
// for a client the daemon cannot watch; an idle daemon refuses new calls
// before it shuts down.
#include <malloc.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/kiln_service.h"
#include "server/process_watch.h"
#include "server/status_map.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

void KilnService::Shutdown() {
  shutting_down_.store(true);
  // gRPC's server waits for every call to end, and a Hold lasts as long as
  // its client: end them all now.
  holds_.EndAll(grpc::Status(grpc::StatusCode::UNAVAILABLE, "kilnd is shutting down"));
  if (watcher_ != nullptr) watcher_->Stop();
  sessions_.StopAllChannels();
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

bool KilnService::BeginIdleShutdown(absl::Duration idle_for) {
  absl::MutexLock lock(&open_mu_);
  if (shutting_down_.load() || sessions_.count() > 0 ||
      absl::FromChrono(idle_.IdleFor()) < idle_for) {
    return false;
  }
  shutting_down_.store(true);
  return true;
}

}  // namespace kiln::server
