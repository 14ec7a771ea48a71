#include "server/metrics_http.h"

#include <civetweb.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "server/metrics_text.h"
#include "spdlog/spdlog.h"

namespace kiln::server {

struct MetricsHttpContext {
  MetricsRender render;
  std::mutex mu;
  std::string first_message;  // civetweb's: why it could not start
};

namespace {

struct HttpResponse {
  int status;
  std::string bytes;
};

// Responses are written whole rather than through civetweb's response API,
// which answers an HTTP/1.0 request with an HTTP/1.0 status line and adds
// caching headers a scrape has no use for.
HttpResponse Response(int status, absl::string_view reason, absl::string_view content_type,
                      absl::string_view body, bool include_body,
                      absl::string_view extra_headers = "") {
  return {status, absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ",
                               content_type, "\r\nContent-Length: ", body.size(), "\r\n",
                               extra_headers, "Connection: close\r\n\r\n",
                               include_body ? body : "")};
}

HttpResponse Plain(int status, absl::string_view reason, absl::string_view body,
                   absl::string_view extra_headers = "") {
  return Response(status, reason, "text/plain; charset=utf-8", body, true, extra_headers);
}

HttpResponse Answer(absl::string_view method, absl::string_view path,
                    const MetricsRender& render) {
  if (path != "/metrics") {
    return Plain(404, "Not Found", "not found: kilnd serves /metrics only\n");
  }
  if (method != "GET" && method != "HEAD") {
    return Plain(405, "Method Not Allowed", "method not allowed: use GET\n",
                 "Allow: GET, HEAD\r\n");
  }
  return Response(200, "OK", kMetricsContentType, render(), method == "GET");
}

MetricsHttpContext& ContextOf(const mg_connection* conn) {
  return *static_cast<MetricsHttpContext*>(mg_get_user_data(mg_get_context(conn)));
}

// Every request civetweb has parsed (its path decoded, the query string
// split off).
int BeginRequest(mg_connection* conn) {
  const mg_request_info* request = mg_get_request_info(conn);
  const HttpResponse response =
      Answer(request->request_method, request->local_uri, ContextOf(conn).render);
  mg_write(conn, response.bytes.data(), response.bytes.size());
  return response.status;  // handled
}

// A request civetweb could not parse (or did not get whole in time) gets
// our response rather than its page, whose status line would say HTTP/1.0
// when the request did not name a version.
int HttpError(mg_connection* conn, int status, const char* message) {
  const HttpResponse response =
      Plain(status, mg_get_response_code_text(conn, status), absl::StrCat(message, "\n"));
  mg_write(conn, response.bytes.data(), response.bytes.size());
  return 0;  // handled
}

int LogMessage(const mg_connection* conn, const char* message) {
  MetricsHttpContext& context = ContextOf(conn);
  {
    std::lock_guard<std::mutex> lock(context.mu);
    if (context.first_message.empty()) context.first_message = message;
  }
  spdlog::debug("metrics endpoint: {}", message);
  return 1;  // civetweb writes it nowhere else
}

}  // namespace

std::string MetricsHttpResponse(absl::string_view method, absl::string_view path,
                                const MetricsRender& render) {
  return Answer(method, path, render).bytes;
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    int port, MetricsRender render) {
  const std::string where = absl::StrCat("127.0.0.1:", port);
  auto context = std::make_unique<MetricsHttpContext>();
  context->render = std::move(render);

  const std::string threads = std::to_string(kMaxConnections);
  const std::string timeout_ms = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(kConnectionTimeout).count());
  const std::string request_bytes = std::to_string(kMaxRequestBytes);
  const char* options[] = {"listening_ports", where.c_str(),  // never another interface
                           "num_threads", threads.c_str(),
                           "connection_queue", threads.c_str(),
                           "listen_backlog", "64",
                           "request_timeout_ms", timeout_ms.c_str(),
                           "max_request_size", request_bytes.c_str(),
                           "enable_keep_alive", "no",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = BeginRequest;
  callbacks.http_error = HttpError;
  callbacks.log_message = LogMessage;
  mg_init_data init{&callbacks, context.get(), options};
  char error_text[256] = "";
  mg_error_data error{nullptr, error_text, sizeof(error_text)};

  mg_init_library(0);
  mg_context* server = mg_start2(&init, &error);
  mg_server_port bound{};
  if (server == nullptr || mg_get_server_ports(server, 1, &bound) != 1) {
    if (server != nullptr) mg_stop(server);
    mg_exit_library();
    std::lock_guard<std::mutex> lock(context->mu);
    return absl::UnavailableError(
        absl::StrCat("metrics endpoint on ", where, ": ",
                     context->first_message.empty() ? error_text : context->first_message));
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(std::move(context), server, bound.port));
}

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<MetricsHttpContext> context,
                                     mg_context* server, int port)
    : context_(std::move(context)), server_(server), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  mg_context* server = server_.exchange(nullptr);
  if (server == nullptr) return;
  mg_stop(server);  // joins civetweb's threads and closes every socket
  mg_exit_library();
}

}  // namespace kiln::server
