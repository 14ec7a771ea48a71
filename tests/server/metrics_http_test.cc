// The /metrics endpoint over real loopback sockets: 200 with the rendered
// text, 404/405/400 otherwise, one response per connection, and a
// silent or slow client neither blocks other scrapes while a worker is free
// nor keeps its socket past the timeout.
#include "server/metrics_http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/metrics_text.h"

namespace kiln::server {
namespace {

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Everything the server sends until it closes.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::string Request(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  std::string response = ReadAll(fd);
  close(fd);
  return response;
}

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

class MetricsHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = MetricsHttpServer::Start(0, [this] {
      ++renders_;
      return std::string("# HELP kiln_clients Open client sessions.\n"
                         "# TYPE kiln_clients gauge\nkiln_clients 3\n");
    });
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
    ASSERT_GT(server_->port(), 0);
  }
  std::unique_ptr<MetricsHttpServer> server_;
  std::atomic<int> renders_{0};
};

TEST_F(MetricsHttpTest, GetMetricsAnswersThePrometheusTextAndCloses) {
  const std::string r =
      Request(server_->port(), "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos);
  const size_t body = r.find("\r\n\r\n") + 4;
  EXPECT_EQ(r.substr(body).size(),
            std::stoul(r.substr(r.find("Content-Length: ") + 16)));
  EXPECT_NE(r.find("\nkiln_clients 3\n"), std::string::npos);
  // A query string is ignored; HEAD gets the headers only.
  EXPECT_EQ(Request(server_->port(), "GET /metrics?x=1 HTTP/1.0\r\n\r\n").rfind("HTTP/1.1 200", 0),
            0u);
  const std::string head = Request(server_->port(), "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");
}

TEST_F(MetricsHttpTest, OtherPathsMethodsAndMalformedRequestsGetTheirStatus) {
  EXPECT_EQ(Request(server_->port(), "GET / HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Request(server_->port(), "GET /metricsx HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0),
            0u);
  const std::string post =
      Request(server_->port(), "POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(post.rfind("HTTP/1.1 405", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(Request(server_->port(), "hello\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(Request(server_->port(), "GET /metrics SPDY/3\r\n\r\n").rfind("HTTP/1.1 400", 0), 0u);
  // A head past the bound is refused without waiting for its end (civetweb
  // 1.15 answers it 400, like any request it cannot parse).
  const std::string huge = "GET /metrics HTTP/1.1\r\nX: " + std::string(kMaxRequestBytes, 'a');
  EXPECT_EQ(Request(server_->port(), huge).rfind("HTTP/1.1 400", 0), 0u);
  EXPECT_EQ(renders_.load(), 0);  // none of these rendered the metrics
}

TEST_F(MetricsHttpTest, SilentClientsDoNotBlockOtherScrapes) {
  // Silent connections hold a worker each, up to one short of all of
  // them: a real scrape gets the last one at once.
  std::vector<int> silent;
  for (size_t i = 0; i + 2 < kMaxConnections; ++i) silent.push_back(Connect(server_->port()));
  const int partial = Connect(server_->port());
  ASSERT_GT(send(partial, "GET /met", 8, MSG_NOSIGNAL), 0);  // and never the rest
  const auto start = std::chrono::steady_clock::now();
  const std::string r = Request(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  for (int fd : silent) close(fd);
  close(partial);
}

TEST_F(MetricsHttpTest, MoreSilentClientsThanWorkersDelayAScrapeByTheTimeoutAtMost) {
  // Every worker held and more waiting: the scrape waits its turn, which
  // comes when the silent connections ahead of it are dropped.
  std::vector<int> silent;
  for (size_t i = 0; i < kMaxConnections + 4; ++i) silent.push_back(Connect(server_->port()));
  const auto start = std::chrono::steady_clock::now();
  const std::string r = Request(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, kConnectionTimeout + std::chrono::seconds(3));
  for (int fd : silent) close(fd);
}

TEST_F(MetricsHttpTest, AStalledConnectionIsClosedAfterTheTimeout) {
  const int fd = Connect(server_->port());
  ASSERT_GT(send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL), 0);
  const auto start = std::chrono::steady_clock::now();
  // Closed with civetweb's 400 for the unfinished request.
  EXPECT_EQ(ReadAll(fd).rfind("HTTP/1.1 400", 0), 0u);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, kConnectionTimeout - std::chrono::milliseconds(500));
  EXPECT_LT(waited, kConnectionTimeout + std::chrono::seconds(3));
  close(fd);
}

TEST_F(MetricsHttpTest, StopClosesEverySocket) {
  const int before = OpenFds();
  std::vector<int> open;
  for (int i = 0; i < 4; ++i) open.push_back(Connect(server_->port()));
  for (int i = 0; i < 20; ++i) Request(server_->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  server_.reset();  // Stop: civetweb's listening socket closed
  for (int fd : open) {
    EXPECT_EQ(ReadAll(fd), "");  // the server's end is gone
    close(fd);
  }
  EXPECT_EQ(OpenFds(), before - 1);
}

TEST(MetricsHttpServerTest, ListensOnLoopbackOnlyAndReportsATakenPort) {
  auto first = MetricsHttpServer::Start(0, [] { return std::string(); });
  ASSERT_TRUE(first.ok()) << first.status();
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  // The port is bound on 127.0.0.1: binding it on another address of the
  // loopback net works, so the wildcard address was never taken.
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*first)->port()));
  addr.sin_addr.s_addr = htonl(0x7f000002);  // 127.0.0.2
  EXPECT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&addr), len), 0);
  close(probe);
  auto second = MetricsHttpServer::Start((*first)->port(), [] { return std::string(); });
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(absl::StrCat("127.0.0.1:", (*first)->port())),
            std::string::npos);
}

TEST(MetricsHttpResponseTest, BuildsResponsesWithoutSockets) {
  int renders = 0;
  const MetricsRender render = [&renders] {
    ++renders;
    return std::string("kiln_clients 0\n");
  };
  EXPECT_EQ(MetricsHttpResponse("GET", "/metrics", render).rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(MetricsHttpResponse("DELETE", "/metrics", render).rfind("HTTP/1.1 405", 0), 0u);
  EXPECT_EQ(MetricsHttpResponse("GET", "/metrics/", render).rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(MetricsHttpResponse("HEAD", "/", render).rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(renders, 1);
}

}  // namespace
}  // namespace kiln::server
