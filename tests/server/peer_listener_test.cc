// The daemon's own listener: peers are checked by their kernel credentials
// before gRPC sees them, a client cannot pass for another pid, TCP calls
// need the token, and a socket passed by a service manager is served.
#include "server/peer_listener.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"
#include "server/kiln_service.h"
#include "server/process_watch.h"
#include "tests/testing/service_fixture.h"

namespace kiln::server {
namespace {

namespace fs = std::filesystem;
using PeerListenerTest = kiln::testing::ServiceFixture;

grpc::Status OpenSessionAs(kiln::v1::Kiln::Stub* stub, int pid, uint64_t pid_namespace) {
  grpc::ClientContext ctx;
  kiln::v1::OpenSessionRequest req;
  req.set_pid(pid);
  req.set_pid_namespace(pid_namespace);
  kiln::v1::OpenSessionResponse resp;
  return stub->OpenSession(&ctx, req, &resp);
}

int ConnectUnix(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST_F(PeerListenerTest, SocketIsClosedToOtherUsers) {
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "s.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(PeerListenerTest, ClaimingAnotherPidIsRefused) {
  // In the daemon's pid namespace the kernel's pid must match the claim.
  grpc::Status s = OpenSessionAs(stub_.get(), getppid(), OwnPidNamespace());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(s.error_message().find(std::to_string(getpid())), std::string::npos)
      << s.error_message();
  EXPECT_TRUE(OpenSessionAs(stub_.get(), getpid(), OwnPidNamespace()).ok());
  EXPECT_EQ(OpenSessionAs(stub_.get(), -5, 0).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // A client that does not say is taken for what the kernel says.
  EXPECT_TRUE(OpenSessionAs(stub_.get(), 0, 0).ok());
  ExpectReluWorks(CompileRelu(16));
}

TEST_F(PeerListenerTest, PeerOfKnowsOnlyAcceptedConnections) {
  EXPECT_FALSE(listener_->PeerOf("unix:/x").has_value());
  EXPECT_FALSE(listener_->PeerOf("ipv4:127.0.0.1:5").has_value());
  EXPECT_FALSE(listener_->PeerOf("fd:999999").has_value());
  EXPECT_FALSE(listener_->PeerOf("fd:").has_value());
}

TEST_F(PeerListenerTest, AnotherUsersConnectionIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user";
  const std::string path = (dir_ / "s.sock").string();
  // The socket is 0600 in a directory of ours; make it reachable so the
  // kernel lets the other user connect and the credential check is what
  // refuses it.
  chmod(dir_.c_str(), 0755);
  chmod(path.c_str(), 0666);
  pid_t child = fork();
  if (child == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
    int fd = ConnectUnix(path);
    if (fd < 0) _exit(11);
    // The daemon closes the connection: the read sees end of file.
    char byte;
    ssize_t n = read(fd, &byte, 1);
    _exit(n == 0 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(listener_->refused(), 1u);
  ExpectReluWorks(CompileRelu(16));
}

TEST(PeerCredentialsTest, OwnUserOnly) {
  EXPECT_TRUE(PeerAllowed(1000, 1000));
  EXPECT_FALSE(PeerAllowed(0, 1000));
  EXPECT_FALSE(PeerAllowed(1000, 0));
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  auto cred = CredentialsOf(pair[0]);
  ASSERT_TRUE(cred.ok());
  EXPECT_EQ(cred->pid, getpid());
  EXPECT_EQ(cred->uid, geteuid());
  close(pair[0]);
  close(pair[1]);
}

TEST(PeerListenerAdoptTest, TakesAListeningSocketAndServesIt) {
  const fs::path dir = fs::temp_directory_path() / ("kiln-adopt-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "a.sock").string();
  // A service manager's socket: bound and listening before the daemon.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  int not_listening = dup(fd);
  EXPECT_EQ(PeerListener::Adopt(not_listening).status().code(),
            absl::StatusCode::kInvalidArgument);
  close(not_listening);
  ASSERT_EQ(listen(fd, 16), 0);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_EQ(PeerListener::Adopt(pipe_fds[0]).status().code(), absl::StatusCode::kInvalidArgument);
  close(pipe_fds[0]);
  close(pipe_fds[1]);

  auto listener = PeerListener::Adopt(fd);
  ASSERT_TRUE(listener.ok()) << listener.status();
  KilnService service("");
  service.SetAccess(listener->get(), "");
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  (*listener)->Start(server.get());
  auto stub = kiln::v1::Kiln::NewStub(
      grpc::CreateChannel("unix:" + path, grpc::InsecureChannelCredentials()));
  EXPECT_TRUE(OpenSessionAs(stub.get(), getpid(), OwnPidNamespace()).ok());
  (*listener)->Stop();
  server->Shutdown();
  service.Shutdown();
  listener->reset();
  fs::remove_all(dir);
}

TEST(InheritedListenSocketTest, OnlyWhenPassedToThisProcess) {
  unsetenv("LISTEN_PID");
  unsetenv("LISTEN_FDS");
  EXPECT_FALSE(InheritedListenSocket().has_value());
  setenv("LISTEN_PID", std::to_string(getpid() + 1).c_str(), 1);
  setenv("LISTEN_FDS", "1", 1);
  EXPECT_FALSE(InheritedListenSocket().has_value());  // meant for another process
  setenv("LISTEN_PID", std::to_string(getpid()).c_str(), 1);
  setenv("LISTEN_FDS", "0", 1);
  EXPECT_FALSE(InheritedListenSocket().has_value());
  setenv("LISTEN_FDS", "1", 1);
  EXPECT_EQ(InheritedListenSocket(), 3);
  // Consumed: a child started later does not take it for its own.
  EXPECT_EQ(std::getenv("LISTEN_PID"), nullptr);
  EXPECT_EQ(std::getenv("LISTEN_FDS"), nullptr);
}

TEST(TcpTokenTest, CallsOverTcpNeedTheToken) {
  const std::string token = "0123456789abcdef-token";
  KilnService service("");
  service.SetAccess(nullptr, token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_GT(port, 0);
  auto stub = kiln::v1::Kiln::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  auto call = [&](const std::string& authorization) {
    grpc::ClientContext ctx;
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    kiln::v1::StatsRequest req;
    kiln::v1::StatsResponse resp;
    return stub->GetStats(&ctx, req, &resp).error_code();
  };
  EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer " + token + "x"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call(token), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer " + token), grpc::StatusCode::OK);
  {
    // OpenSession is guarded like the rest.
    grpc::ClientContext ctx;
    kiln::v1::OpenSessionRequest req;
    req.set_pid(getpid());
    kiln::v1::OpenSessionResponse resp;
    EXPECT_EQ(stub->OpenSession(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  server->Shutdown();
  service.Shutdown();
}

TEST(TcpTokenTest, NoTokenConfiguredRefusesEveryTcpCall) {
  KilnService service("");
  service.SetAccess(nullptr, "");
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  auto stub = kiln::v1::Kiln::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer ");
  kiln::v1::StatsRequest req;
  kiln::v1::StatsResponse resp;
  EXPECT_EQ(stub->GetStats(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown();
  service.Shutdown();
}

// Listeners gRPC opens itself (what `--tcp unix:PATH` used to make) carry
// no credentials the daemon checked: only its own listener's connections
// are let in without the token.
TEST(TcpTokenTest, UnixPeersNotFromTheDaemonsListenerNeedTheToken) {
  const std::string token = "0123456789abcdef-token";
  const fs::path dir = fs::temp_directory_path() / ("kiln-grpc-unix-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto listener = PeerListener::Bind((dir / "own.sock").string());
  ASSERT_TRUE(listener.ok()) << listener.status();
  KilnService service("");
  service.SetAccess(listener->get(), token);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + (dir / "grpc.sock").string(),
                           grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  (*listener)->Start(server.get());
  auto stats = [&](const std::string& socket, const std::string& authorization) {
    auto stub = kiln::v1::Kiln::NewStub(grpc::CreateChannel(
        "unix:" + (dir / socket).string(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    kiln::v1::StatsResponse resp;
    return stub->GetStats(&ctx, kiln::v1::StatsRequest(), &resp);
  };
  EXPECT_TRUE(stats("own.sock", "").ok());
  grpc::Status bare = stats("grpc.sock", "");
  EXPECT_EQ(bare.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(bare.error_message().find("token"), std::string::npos) << bare.error_message();
  EXPECT_TRUE(stats("grpc.sock", "Bearer " + token).ok());
  (*listener)->Stop();
  server->Shutdown();
  service.Shutdown();
  listener->reset();
  fs::remove_all(dir);
}

// A TCP caller holds only the token: GetStats lists its own session, not
// the pids and names of the daemon's user's other clients.
TEST(TcpTokenTest, OverTcpGetStatsListsOnlyTheCallersSession) {
  const std::string token = "0123456789abcdef-token";
  const fs::path dir = fs::temp_directory_path() / ("kiln-tcp-stats-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto listener = PeerListener::Bind((dir / "s.sock").string());
  ASSERT_TRUE(listener.ok()) << listener.status();
  KilnService service("");
  service.SetAccess(listener->get(), token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  (*listener)->Start(server.get());
  auto unix_stub = kiln::v1::Kiln::NewStub(
      grpc::CreateChannel("unix:" + (dir / "s.sock").string(), grpc::InsecureChannelCredentials()));
  auto tcp_stub = kiln::v1::Kiln::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  auto open = [&](kiln::v1::Kiln::Stub* stub, const std::string& name) {
    grpc::ClientContext ctx;
    if (stub == tcp_stub.get()) ctx.AddMetadata("authorization", "Bearer " + token);
    kiln::v1::OpenSessionRequest req;
    req.set_pid(getpid());
    req.set_client_name(name);
    kiln::v1::OpenSessionResponse resp;
    EXPECT_TRUE(stub->OpenSession(&ctx, req, &resp).ok());
    return resp;
  };
  const kiln::v1::OpenSessionResponse local = open(unix_stub.get(), "local");
  const kiln::v1::OpenSessionResponse remote = open(tcp_stub.get(), "remote");
  EXPECT_FALSE(local.hold_required());
  EXPECT_TRUE(remote.hold_required());  // a pid it only names is not watched
  auto listed = [&](kiln::v1::Kiln::Stub* stub, const std::string& session) {
    grpc::ClientContext ctx;
    if (stub == tcp_stub.get()) ctx.AddMetadata("authorization", "Bearer " + token);
    kiln::v1::StatsRequest req;
    req.set_session_id(session);
    kiln::v1::StatsResponse resp;
    EXPECT_TRUE(stub->GetStats(&ctx, req, &resp).ok());
    std::vector<std::string> names;
    for (const auto& c : resp.clients()) names.push_back(c.client_name());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(resp.sessions(), 2u);
    return names;
  };
  using Names = std::vector<std::string>;
  EXPECT_EQ(listed(tcp_stub.get(), remote.session_id()), Names{"remote"});
  EXPECT_EQ(listed(tcp_stub.get(), ""), Names{});
  EXPECT_EQ(listed(tcp_stub.get(), local.session_id()), Names{"local"});  // knows its id
  EXPECT_EQ(listed(unix_stub.get(), ""), (Names{"local", "remote"}));
  (*listener)->Stop();
  server->Shutdown();
  service.Shutdown();
  listener->reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln::server
