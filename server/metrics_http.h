// MetricsHttpServer: --metrics-port's HTTP/1.1 endpoint. GET (or HEAD)
// /metrics answers with the Prometheus text the render function returns;
// other paths get 404, other methods 405, a malformed request 400, one
// whose head passes kMaxRequestBytes 431. Every connection is closed after
// its response (no keep-alive).
//
// Listens on 127.0.0.1 only, never on other interfaces. Serves on a thread
// of its own with non-blocking sockets and poll(): a slow or silent client
// holds one of kMaxConnections slots for at most kConnectionTimeout (less
// when the slots are full: a new connection then takes the slot of the
// oldest one still without a whole request), so it never blocks the daemon
// or other scrapes; every socket is closed when its connection ends or the
// server stops.
//
// Thread-safety: Stop() (and the destructor) may be called from any thread
// but the server's own; `render` is called on the server's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::server {

inline constexpr size_t kMaxRequestBytes = 8192;
inline constexpr size_t kMaxConnections = 16;
inline constexpr std::chrono::seconds kConnectionTimeout{5};

using MetricsRender = std::function<std::string()>;

// The whole response (status line, headers, body) to the request whose head
// (request line and headers, up to the blank line) is `head`.
std::string MetricsHttpResponse(absl::string_view head, const MetricsRender& render);

class MetricsHttpServer {
 public:
  // Listens on 127.0.0.1:`port` (0: a free port, see port()) and starts
  // serving. UNAVAILABLE naming the address when it cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(int port, MetricsRender render);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  // Stops serving and closes every socket; open connections are dropped.
  // Idempotent.
  void Stop();

 private:
  MetricsHttpServer(int listen_fd, int wake_fd, int port, MetricsRender render);
  void Loop();

  const int listen_fd_;
  const int wake_fd_;  // eventfd: Stop() wakes the loop
  const int port_;
  const MetricsRender render_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kiln::server
