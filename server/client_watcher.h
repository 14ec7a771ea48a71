// The daemon's watcher thread: one look every `interval` (exited clients,
// idle constants and run arenas; KilnService::WatchOnce) until stopped.
//
// A look that throws fails that look alone (request_guard.h): it is logged
// and the next look comes on time, since a watcher that died would leave
// every crashed client's memory behind for the daemon's lifetime.
//
// Thread-safe: Stop() may be called from any thread, more than once; the
// destructor calls it. `look` runs on the watcher's thread only, never
// after Stop() returns.
#pragma once

#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kiln::server {

class ClientWatcher {
 public:
  // Starts the thread; the first look comes after one `interval`.
  ClientWatcher(absl::Duration interval, std::function<void()> look);
  ~ClientWatcher() { Stop(); }
  ClientWatcher(const ClientWatcher&) = delete;
  ClientWatcher& operator=(const ClientWatcher&) = delete;

  // Wakes the thread and waits for it (and a look in progress) to end.
  void Stop();

 private:
  void Loop();

  const absl::Duration interval_;
  const std::function<void()> look_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Joined under join_mu_, so two Stop()s do not both join.
  absl::Mutex join_mu_;
  std::thread thread_;
};

}  // namespace kiln::server
