#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/metrics_text.h"
#include "spdlog/spdlog.h"

namespace kiln::server {
namespace {

using Clock = std::chrono::steady_clock;

// After the response, how long the client gets to close its side before
// we do: closing with its unread bytes pending would reset the connection
// and could lose the response.
constexpr std::chrono::milliseconds kLingerAfterResponse{500};

std::string Response(absl::string_view status, absl::string_view content_type,
                     absl::string_view body, bool include_body,
                     absl::string_view extra_headers = "") {
  return absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\n", extra_headers,
                      "Connection: close\r\n\r\n", include_body ? body : "");
}

std::string Plain(absl::string_view status, absl::string_view body,
                  absl::string_view extra_headers = "") {
  return Response(status, "text/plain; charset=utf-8", body, true, extra_headers);
}

// Where the request head ends (just past the blank line), or npos.
size_t HeadEnd(absl::string_view data) {
  size_t crlf = data.find("\r\n\r\n");
  size_t lf = data.find("\n\n");
  size_t end = std::string::npos;
  if (crlf != absl::string_view::npos) end = crlf + 4;
  if (lf != absl::string_view::npos) end = std::min(end, lf + 2);
  return end;
}

struct Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;
  std::string out;
  size_t sent = 0;
  enum class State { kReading, kWriting, kLingering } state = State::kReading;
};

}  // namespace

std::string MetricsHttpResponse(absl::string_view head, const MetricsRender& render) {
  const absl::string_view line = head.substr(0, head.find_first_of("\r\n"));
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || parts[0].empty() || parts[1].empty() ||
      !absl::StartsWith(parts[2], "HTTP/1.")) {
    return Plain("400 Bad Request", "malformed request line\n");
  }
  const absl::string_view method = parts[0];
  const absl::string_view path = parts[1].substr(0, parts[1].find('?'));
  if (path != "/metrics") {
    return Plain("404 Not Found", "not found: kilnd serves /metrics only\n");
  }
  if (method != "GET" && method != "HEAD") {
    return Plain("405 Method Not Allowed", "method not allowed: use GET\n",
                 "Allow: GET, HEAD\r\n");
  }
  return Response("200 OK", kMetricsContentType, render(), method == "GET");
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    int port, MetricsRender render) {
  const std::string where = absl::StrCat("127.0.0.1:", port);
  auto fail = [&](const char* what) {
    return absl::UnavailableError(absl::StrCat("metrics endpoint: cannot ", what, " on ", where,
                                               ": ", std::strerror(errno)));
  };
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail("create a socket");
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // never another interface
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 64) != 0) {
    absl::Status s = fail("listen");
    close(fd);
    return s;
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    absl::Status s = fail("create an eventfd");
    close(fd);
    return s;
  }
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, wake, ntohs(addr.sin_port), std::move(render)));
}

MetricsHttpServer::MetricsHttpServer(int listen_fd, int wake_fd, int port, MetricsRender render)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), render_(std::move(render)) {
  thread_ = std::thread([this] { Loop(); });
}

MetricsHttpServer::~MetricsHttpServer() {
  Stop();
  close(listen_fd_);
  close(wake_fd_);
}

void MetricsHttpServer::Stop() {
  if (stop_.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void MetricsHttpServer::Loop() {
  std::vector<Connection> conns;
  std::vector<pollfd> fds;
  // After accept fails for want of fds, a pause: the listening socket stays
  // readable and polling it again at once would spin.
  Clock::time_point accept_after;
  while (!stop_.load()) {
    // Wake fd, listening socket (while a slot is free), then connections.
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = Clock::now() >= accept_after;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    Clock::time_point next_deadline = Clock::now() + std::chrono::seconds(1);
    for (const Connection& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.state == Connection::State::kWriting ? POLLOUT
                                                                                      : POLLIN),
                     0});
      next_deadline = std::min(next_deadline, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_deadline -
                                                                            Clock::now());
    if (poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, wait.count()) + 1)) <
        0) {
      if (errno == EINTR) continue;
      spdlog::error("metrics endpoint: poll failed: {}", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    const Clock::time_point now = Clock::now();
    // Connections first: fds[2 + i] belongs to conns[i] as polled.
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      const short ev = fds[2 + i].revents;
      bool done = false;
      if (c.state == Connection::State::kReading && ev != 0) {
        char buf[4096];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.append(buf, static_cast<size_t>(n));
          const size_t end = HeadEnd(c.in);
          if (end != std::string::npos) {
            c.out = MetricsHttpResponse(absl::string_view(c.in).substr(0, end), render_);
          } else if (c.in.size() > kMaxRequestBytes) {
            c.out = Plain("431 Request Header Fields Too Large",
                          absl::StrCat("request head over ", kMaxRequestBytes, " bytes\n"));
          }
          if (!c.out.empty()) c.state = Connection::State::kWriting;
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          done = true;  // closed before a whole request, or an error
        }
      } else if (c.state == Connection::State::kWriting && ev != 0) {
        const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
          c.sent += static_cast<size_t>(n);
          if (c.sent == c.out.size()) {
            shutdown(c.fd, SHUT_WR);
            c.state = Connection::State::kLingering;
            c.deadline = std::min(c.deadline, now + kLingerAfterResponse);
          }
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          done = true;
        }
      } else if (c.state == Connection::State::kLingering && ev != 0) {
        // Whatever the client still sends is dropped; its close ends it.
        char buf[4096];
        const ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
        done = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
      }
      if (done || now >= c.deadline) {
        close(c.fd);
        c.fd = -1;
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(),
                               [](const Connection& c) { return c.fd < 0; }),
                conns.end());
    if (accepting && fds[1].revents != 0) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_after = now + std::chrono::milliseconds(100);
          }
          break;  // EAGAIN: none left
        }
        Connection c;
        c.fd = fd;
        c.deadline = now + kConnectionTimeout;
        conns.push_back(std::move(c));
        if (conns.size() > kMaxConnections) {
          // Over the bound: the oldest connection still without a whole
          // request goes (the new one, if all others are answered), so
          // silent clients cannot starve a scrape.
          auto oldest = conns.end();
          for (auto it = conns.begin(); it != conns.end(); ++it) {
            if (it->state == Connection::State::kReading &&
                (oldest == conns.end() || it->deadline < oldest->deadline)) {
              oldest = it;
            }
          }
          close(oldest->fd);
          conns.erase(oldest);
        }
      }
    }
  }
  for (const Connection& c : conns) close(c.fd);
}

}  // namespace kiln::server
