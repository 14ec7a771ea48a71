// MetricsHttpServer: --metrics-port's HTTP/1.1 endpoint, served by civetweb
// (Debian's libcivetweb1). GET (or HEAD) /metrics answers with the
// Prometheus text the render function returns; other paths get 404, other
// methods 405, a request civetweb cannot parse 400 (so does one whose head
// passes kMaxRequestBytes, at once, or is not whole kConnectionTimeout
// after a worker took it up). Every connection is closed after its
// response (no keep-alive).
//
// Listens on 127.0.0.1 only, never on other interfaces. civetweb accepts on
// a thread of its own and serves each connection on one of kMaxConnections
// worker threads; accepted connections wait for a worker in a queue of
// kMaxConnections more. A slow or silent client never blocks the daemon; it
// delays a scrape only while every worker holds one like it, and by
// kConnectionTimeout at most for each round of them.
//
// Thread-safety: Stop() (and the destructor) may be called from any thread
// but a worker's; `render` is called on the worker threads, one call per
// scrape, possibly several at once.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct mg_context;

namespace kiln::server {

struct MetricsHttpContext;  // what civetweb's callbacks are given

inline constexpr size_t kMaxRequestBytes = 8192;
inline constexpr size_t kMaxConnections = 16;
inline constexpr std::chrono::seconds kConnectionTimeout{5};

using MetricsRender = std::function<std::string()>;

// The whole response (status line, headers, body) to a parsed request:
// `method` and `path` (the target without its query string).
std::string MetricsHttpResponse(absl::string_view method, absl::string_view path,
                                const MetricsRender& render);

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
  // Takes up to about 2 s: civetweb's threads look for the stop between
  // polls. Idempotent.
  void Stop();

 private:
  MetricsHttpServer(std::unique_ptr<MetricsHttpContext> context, mg_context* server, int port);

  const std::unique_ptr<MetricsHttpContext> context_;
  std::atomic<mg_context*> server_;  // null once stopped
  const int port_;
};

}  // namespace kiln::server
