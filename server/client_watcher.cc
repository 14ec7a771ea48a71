#include "server/client_watcher.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "server/request_guard.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

ClientWatcher::ClientWatcher(absl::Duration interval, std::function<void()> look)
    : interval_(interval), look_(std::move(look)) {
  thread_ = std::thread([this] { Loop(); });
}

void ClientWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  absl::MutexLock lock(&join_mu_);
  if (thread_.joinable()) thread_.join();
}

void ClientWatcher::Loop() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), interval_)) {
    mu_.Unlock();
    if (absl::Status s = Guarded("watching clients", [&] {
          look_();
          return absl::OkStatus();
        });
        !s.ok()) {
      spdlog::error("{}", std::string(s.message()));
    }
    mu_.Lock();
  }
}

}  // namespace kiln::server
